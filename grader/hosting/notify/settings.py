"""A participant's notification addresses, in the caller's transaction (the service opens it)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from grader.hosting.clock import utcnow
from grader.hosting.db.models import NotifySetting
from grader.hosting.notify.mail import check_address
from grader.hosting.notify.signing import new_secret
from grader.hosting.notify.webhook import parse_url


def _setting(session: Session, participant_id: int) -> NotifySetting:
    setting = session.get(NotifySetting, participant_id)
    if setting is None:
        setting = NotifySetting(participant_id=participant_id, updated_at=utcnow())
        session.add(setting)
    return setting


def set_webhook(session: Session, participant_id: int, url: str) -> str:
    """Set the webhook URL with a new secret, returned to be shown once (a URL set again gets a new secret)."""
    parse_url(url)  # its form now; where it resolves is checked at each try
    setting = _setting(session, participant_id)
    setting.webhook_url, setting.webhook_secret, setting.updated_at = url, new_secret(), utcnow()
    return setting.webhook_secret


def clear_webhook(session: Session, participant_id: int) -> None:
    """No webhook: URL and secret forgotten (deliveries pending to it end untried)."""
    setting = _setting(session, participant_id)
    setting.webhook_url, setting.webhook_secret, setting.updated_at = None, None, utcnow()


def set_email(session: Session, participant_id: int, address: str | None) -> None:
    """Set (or, with None, clear) the e-mail address."""
    setting = _setting(session, participant_id)
    setting.email, setting.updated_at = (None if address is None else check_address(address)), utcnow()


def current(session: Session, participant_id: int) -> tuple[str | None, str | None]:
    """The webhook URL and e-mail address set (never the secret)."""
    setting = session.get(NotifySetting, participant_id)
    return (None, None) if setting is None else (setting.webhook_url, setting.email)
