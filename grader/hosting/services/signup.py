"""Sign-up on the web, the host's decision, and a person's own token rotation (docs/hosting.md, "Sign-up").

A competition's file says who may sign up: ``open`` (registered at once), ``approval`` (the host approves or refuses
with ``grader admin registrations``) or ``closed`` (the default: only the host registers people). A sign-up makes a
person of the server (their token shown once) and a registration row in the competition; a registration that makes
a participant is logged (``registration``: the name committed like a receipt's, the digest of the rules accepted).
Sign-up exists on a server of many competitions only, whose people are server-wide identities.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.hosting.clock import utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Participant, Registration
from grader.hosting.db.session import Database
from grader.hosting.directory.people import People
from grader.hosting.errors import HostingError
from grader.hosting.identity import participants
from grader.hosting.identity.names import check_new_name
from grader.hosting.identity.tokens import new_token
from grader.hosting.services.competition import competition_end
from grader.hosting.transparency.host_log import HostLog
from grader.hosting.transparency.log_events import log_registration, logged_end

OPEN, APPROVAL, CLOSED = "open", "approval", "closed"
PENDING, APPROVED, REFUSED = "pending", "approved", "refused"
MAX_EMAIL = 254


class SignupClosed(HostingError):
    """This competition takes no sign-up (404: there is no such page)."""


@dataclass(frozen=True)
class SignedUp:
    """A sign-up's outcome: the token (shown once, never stored) and whether the person is a participant already."""

    token: str
    state: str


def rules_sha256(rules: str) -> str:
    """The digest of a rules text as the log records it: SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(rules.encode("utf-8")).hexdigest()


def sign_up_open(ctx: ServerContext) -> bool:
    """Whether the competition takes sign-ups now (its file allows them, on a server of many, before its end)."""
    return ctx.competition.registration != CLOSED and isinstance(ctx.people, People) and not competition_end(ctx).ended


def _people(ctx: ServerContext) -> People:
    if ctx.competition.registration == CLOSED or not isinstance(ctx.people, People):
        raise SignupClosed("this competition takes no sign-up")
    return ctx.people


def _email(email: str) -> str | None:
    email = email.strip()
    if not email:
        return None
    local, at, domain = email.rpartition("@")
    if len(email) > MAX_EMAIL or not at or not local or "." not in domain or not email.isprintable() or any(c.isspace() for c in email):
        raise HostingError(f"an e-mail address is name@domain, at most {MAX_EMAIL} characters (or leave it empty)")
    return email


def sign_up(ctx: ServerContext, name: str, email: str, accepted_rules: str) -> SignedUp:
    """Sign ``name`` up: a new person of the server and their registration here; refused (one line) when the
    competition takes none or has ended, the rules accepted are not today's, or the name is refused
    (:func:`grader.hosting.identity.names.check_new_name`)."""
    people = _people(ctx)
    if competition_end(ctx).ended:
        raise SignupClosed("the competition has ended: sign-up is closed")
    rules = rules_sha256(ctx.competition.rules or "")
    if accepted_rules != rules:
        raise HostingError("the rules changed since this page was loaded: read them again and accept them")
    address = _email(email)
    with ctx.db.session() as session:
        here = list(session.scalars(select(Registration.name)).all()) + list(session.scalars(select(Participant.name)).all())
    check_new_name(name, [*people.names(), *here])  # the refusal's reason, in one line
    # The read above is advisory: a look-alike stored meanwhile (by this process or another server's) is refused by
    # the server database's unique confusable forms, in the insert itself.
    person, token = people.add(name, distinct=True)
    try:
        with ctx.db.session() as session:
            state = APPROVED if ctx.competition.registration == OPEN else PENDING
            now = utcnow()
            session.add(
                Registration(
                    name=name, email=address, rules_sha256=rules, state=state, requested_at=now, decided_at=now if state == APPROVED else None
                )
            )
            if state == APPROVED:
                _register(session, ctx.log, name, person.token_sha256, rules)
    except BaseException:
        people.forget(name)  # nobody was shown this token: the name is free again
        raise
    return SignedUp(token, state)


def join(ctx: ServerContext, token: str, accepted_rules: str) -> str:
    """Register the person holding ``token`` (a person of the server already, signed up or added elsewhere) in this
    competition, as :func:`sign_up` registers a new one; return the registration's state."""
    people = _people(ctx)
    if competition_end(ctx).ended:
        raise SignupClosed("the competition has ended: sign-up is closed")
    rules = rules_sha256(ctx.competition.rules or "")
    if accepted_rules != rules:
        raise HostingError("the rules changed since this page was loaded: read them again and accept them")
    person = people.holder(token)
    if person is None:
        raise HostingError("unknown or revoked token")
    with ctx.db.session() as session:
        earlier = session.scalar(select(Registration).where(Registration.name == person.name))
        if earlier is not None or participants.is_participant(session, person.name):
            raise HostingError(f"you signed up here already ({earlier.state if earlier is not None else 'registered'})")
        state = APPROVED if ctx.competition.registration == OPEN else PENDING
        now = utcnow()
        session.add(
            Registration(
                name=person.name, email=None, rules_sha256=rules, state=state, requested_at=now, decided_at=now if state == APPROVED else None
            )
        )
        if state == APPROVED:
            _register(session, ctx.log, person.name, person.token_sha256, rules)
    return state


def _register(session: Session, host_log: HostLog | None, name: str, digest: str, rules: str) -> None:
    """Make ``name`` a participant holding their person's token, and log it (in the same transaction)."""
    participants.register_participant(session, name, digest)
    if host_log is not None:
        log_registration(session, host_log, name=name, rules_sha256=rules)


def registrations(db: Database, state: str | None = None) -> list[Registration]:
    """The competition's sign-ups (those in ``state`` only, when given), oldest first."""
    with db.session() as session:
        query = select(Registration).order_by(Registration.requested_at, Registration.id)
        if state is not None:
            query = query.where(Registration.state == state)
        return list(session.scalars(query).all())


def decide(db: Database, host_log: HostLog | None, people: People, name: str, *, approve: bool) -> Registration:
    """The host's decision on ``name``'s pending sign-up: approved, the person becomes a participant (logged);
    refused, they stay a person of the server, not of this competition."""
    person = people.named(name)
    with db.session() as session:
        row = session.scalar(select(Registration).where(Registration.name == name))
        if row is None:
            raise HostingError(f"no sign-up named {name!r} in this competition")
        if row.state != PENDING:
            raise HostingError(f"{name!r}'s sign-up is {row.state} already")
        if approve:
            if logged_end(session) is not None:  # nobody joins a competition that is over (the audit would see it after the end)
                raise HostingError("the competition has ended: refuse the sign-up instead")
            if person is None or person.revoked_at is not None:
                raise HostingError(f"person {name!r} is revoked on this server: refuse the sign-up instead")
            _register(session, host_log, name, person.token_sha256, row.rules_sha256)
        row.state = APPROVED if approve else REFUSED
        row.decided_at = utcnow()
        return row


def rotate_own_token(ctx: ServerContext, person_sid: str, fingerprint: str) -> str:
    """The signed-in person's new token (their web session, ``person_sid`` and ``fingerprint``, must be live)."""
    people = _people_of_server(ctx)
    person = people.signed_in(person_sid, fingerprint)
    if person is None:
        raise HostingError("sign in first")
    name, digest = person
    return rotate_token(people, name, digest, ctx.served_databases)


def _people_of_server(ctx: ServerContext) -> People:
    if not isinstance(ctx.people, People):
        raise SignupClosed("a token is rotated on a server of many competitions only")
    return ctx.people


def rotate_token(people: People, name: str, old: str, served: Callable[[], list[tuple[str, Database]]] | None) -> str:
    """A new token for person ``name`` (holding the token whose digest is ``old``), in every served competition
    they are registered in and on the server; every web session of theirs ends (their cookies name the old digest).

    The competitions first, the person last: a failure part-way puts back the competitions already changed, so the
    old token keeps working everywhere and nothing is shown.
    """
    token, new = new_token("gp")
    done: list[Database] = []
    try:
        for _competition, db in served() if served is not None else []:
            with db.session() as session:
                if participants.set_participant_digest(session, name, old, new):
                    done.append(db)
        if not people.set_digest(name, old, new):
            raise HostingError("your token changed meanwhile: sign in again")
    except BaseException:
        for db in done:
            with db.session() as session:
                participants.set_participant_digest(session, name, new, old)
        raise
    return token
