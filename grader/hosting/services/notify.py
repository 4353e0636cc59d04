"""A participant's notifications: set or clear the webhook (its secret shown once) and the e-mail address, send a
test, and see the latest deliveries (docs/hosting.md, "Notifications"). Each call is one transaction."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.errors import NotifySettingRefused, NotifyTestLimited
from grader.hosting.notify import outbox, settings

#: Test notifications a participant may ask for per rolling hour.
PINGS_PER_HOUR = 10


def set_webhook(ctx: ServerContext, participant_id: int, url: str) -> str:
    """Set the webhook; its new secret, to show once (the server keeps it to sign, and never shows it again)."""
    with ctx.db.session() as session:
        return settings.set_webhook(session, participant_id, url)


def clear_webhook(ctx: ServerContext, participant_id: int) -> None:
    """No more webhook; what was pending to it is not sent."""
    with ctx.db.session() as session:
        settings.clear_webhook(session, participant_id)


def set_email(ctx: ServerContext, participant_id: int, address: str | None) -> None:
    """Set (None: clear) the e-mail address; refused while the server has no SMTP relay."""
    if address is not None and ctx.competition.notify.smtp_host is None:
        raise NotifySettingRefused("this server sends no e-mail (its host set no [notify] smtp_host); a webhook is possible")
    with ctx.db.session() as session:
        settings.set_email(session, participant_id, address)


def send_test(ctx: ServerContext, participant_id: int) -> int:
    """A ``ping`` to every address set; how many deliveries it made (0: none set). At most :data:`PINGS_PER_HOUR`
    an hour (:class:`NotifyTestLimited`): each is a request the server sends where the participant says."""
    with ctx.db.session() as session:
        if outbox.pings_since(session, participant_id, utcnow() - timedelta(hours=1)) >= PINGS_PER_HOUR:
            raise NotifyTestLimited(f"at most {PINGS_PER_HOUR} test notifications an hour")
        return outbox.record(session, participant_id, {"type": outbox.PING})


def overview(ctx: ServerContext, participant_id: int) -> dict[str, Any]:
    """What the participant set (never the secret) and how their latest deliveries went."""
    with ctx.db.session() as session:
        url, email = settings.current(session, participant_id)
        deliveries = [
            {
                "id": row.facts.get("id"),
                "type": row.facts.get("type"),
                "submission": row.facts.get("submission"),
                "state": row.facts.get("state"),
                "channel": row.channel,
                "tries": row.tries,
                "created_at": iso(row.created_at),
                "done_at": iso(row.done_at),
                "outcome": row.outcome or "pending",
            }
            for row in outbox.recent(session, participant_id)
        ]
    return {"webhook": url, "email": email, "email_available": ctx.competition.notify.smtp_host is not None, "deliveries": deliveries}
