"""The Celery application shared by ``grader serve --broker`` (publisher) and ``grader worker --broker`` (consumer).

The database stays the queue and the source of truth: a Celery message only
says "a job is waiting". The worker that receives it claims the oldest queued
job over the HTTP worker API (a database lease), grades it with the same code
as the embedded workers, and posts the signed result. So a lost, duplicated or
re-delivered message can delay a job but never grade it twice: only the
holder of the current lease of an attempt can post its result, once.

Settings, each chosen against a documented failure mode of long, crash-prone tasks:

- **Acknowledgement at the claim** (``task_acks_late=False``): the message is
  acknowledged as the task starts, and the first thing the task does is claim
  the lease. From then on the lease, its heartbeat and the server's reaper own
  recovery: a worker killed mid-grade stops heartbeating, the lease expires,
  the reaper re-queues the attempt (or ends it ``error`` at the attempt limit,
  counted in the database) and re-dispatches. We do *not* use
  ``acks_late`` + ``task_reject_on_worker_lost``: acks_late alone still acks a
  task whose child was killed (celery #1628), and rejection on worker loss
  re-queues without any retry count, so a submission that kills its worker
  would loop forever (celery discussion #8969). With early acks Redis's
  visibility timeout (1 h by default; re-delivery of a long task, celery #5935
  / #5306) never applies to a grading, because no message stays unacknowledged
  while a grading runs. A worker lost between the ack and the claim leaves the
  job ``queued``; the reaper re-dispatches jobs that wait unclaimed.
- **Prefetch 1, one grading per worker process** (``worker_prefetch_multiplier=1``,
  ``concurrency=1``, the ``solo`` pool): a grading needs a whole machine's
  share of CPU and disk; a prefetched wake-up would only hide work from idle
  workers. Run more ``grader worker`` processes (each with its own token) to
  grade more at once.
- **JSON only** (``task_serializer``/``accept_content``): a broker reachable by
  others must never make a worker unpickle what it sent.
- **No result backend**: results go to the server over HTTPS, signed.
- Short socket timeouts, so a broker outage makes a publish fail fast (the
  reaper re-sends) instead of blocking an upload.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

#: The one task: "a job is waiting" (its argument, a submission id, is a hint; the worker claims the oldest job).
WAKE_TASK = "grader.wake"
#: The queue the server publishes to and workers consume from.
QUEUE = "grader-grading"


def make_celery(broker: str) -> Celery:
    """A Celery app on ``broker`` (``redis://[:password@]host:port/db``) with the settings above."""
    app = Celery("grader", broker=broker, set_as_current=False)
    settings: dict[str, Any] = {
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": False,
        "task_reject_on_worker_lost": False,
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": 1,
        "task_default_queue": QUEUE,
        "task_create_missing_queues": True,
        "worker_hijack_root_logger": False,
        "worker_send_task_events": False,
        "broker_connection_retry_on_startup": True,
        # Celery >= 5.3: a worker that loses the broker cancels nothing it is grading (it holds no unacked
        # message), and reconnects; jobs are safe in the database meanwhile.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "broker_transport_options": {"socket_connect_timeout": 3, "socket_timeout": 10, "visibility_timeout": 3600},
        "broker_connection_timeout": 3,
    }
    app.conf.update(settings)
    return app
