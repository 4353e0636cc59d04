"""Competition hosting: ``grader serve``, participants, quotas, a database-backed job queue, workers.

The database is the one source of truth for every submission's state; the
worker API (claim, heartbeat, fetch the upload, post the result) is the only
way a worker moves a job, whether it runs on this machine or elsewhere.
"""
