"""Participants' notifications: signed webhooks and e-mail of each state and board change of their submissions.

``outbox`` (rows written in the event's transaction), ``settings`` (a participant's addresses), ``addresses`` (the
guard against request forgery), ``signing`` (the HMAC header), ``webhook`` and ``mail`` (one try each), ``sender``
(the server's thread that delivers, with backoff). docs/hosting.md, "Notifications".
"""
