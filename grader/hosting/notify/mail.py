"""One try of an e-mail notification, through the host's SMTP relay (``[notify] smtp_*``).

The relay is the host's choice, not a participant's, so it is not put through the address guard; the participant
chooses only the recipient, checked here to be one plain address (no line break, no list), so it cannot add headers
or recipients. The message says what changed and nothing a participant could not read anyway: no score.
"""

from __future__ import annotations

import re
import smtplib
import ssl
from email.message import EmailMessage
from typing import Any

from grader.hosting.config import NotifyPolicy
from grader.hosting.errors import DeliveryFailed, NotifySettingRefused
from grader.text import escape_control

#: One plain address: a local part and a domain, nothing that separates addresses or starts a header.
ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
ADDRESS_CHARS = 254


def check_address(address: str) -> str:
    """A participant's e-mail address as stored, or :class:`NotifySettingRefused`."""
    if len(address) > ADDRESS_CHARS or ADDRESS.fullmatch(address) is None:
        raise NotifySettingRefused("an e-mail address is one plain address (name@domain), at most 254 characters")
    return address


def message(policy: NotifyPolicy, to: str, competition: str, facts: dict[str, Any]) -> EmailMessage:
    """The e-mail of one event (plain text)."""
    mail = EmailMessage()
    mail["From"] = policy.smtp_from
    mail["To"] = to
    mail["Subject"] = f"[{competition}] {summary(facts)}"
    mail.set_content(
        f"{summary(facts)}.\n\nCompetition: {competition}\nEvent: {facts.get('type')}\nAt: {facts.get('at')}\n\n"
        "Its details (scores, report) are at the competition's API and page, under your token.\n"
    )
    return mail


def summary(facts: dict[str, Any]) -> str:
    """One line: what happened to which submission."""
    if facts.get("type") == "submission.state":
        return f"submission {facts.get('submission')} is {facts.get('state')}"
    if facts.get("type") == "submission.board":
        return f"the board entry of submission {facts.get('submission')} changed"
    return "a test notification"


def send(policy: NotifyPolicy, mail: EmailMessage, *, tls: ssl.SSLContext | None = None) -> None:
    """Hand ``mail`` to the relay; :class:`DeliveryFailed` when it does not take it. ``tls``: the context STARTTLS checks
    the relay's certificate with (default: the system's trust store; the tests trust their own relay's)."""
    if policy.smtp_host is None:
        raise DeliveryFailed("e-mail is off on this server (no [notify] smtp_host)")
    try:
        with smtplib.SMTP(policy.smtp_host, policy.smtp_port, timeout=policy.timeout_s) as relay:
            if policy.smtp_starttls:
                relay.starttls(context=tls or ssl.create_default_context())
            relay.send_message(mail)
    except (OSError, smtplib.SMTPException) as error:
        raise DeliveryFailed(f"SMTP relay: {type(error).__name__}: {escape_control(str(error)[:120])}") from None
