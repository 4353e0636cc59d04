"""Authentication of every route, in one place: the API, the web pages and ``/metrics``.

One check, :func:`verify`, serves every credential: it asks
:mod:`grader.hosting.identity.auth` who holds the token and, only when nobody does,
refuses an address after repeated failures (429) or records one more failure (401).
A valid credential is never refused by the limiter (an attacker's failures from a
shared address must not lock out a participant or the local worker), and each role
has its own bucket per address: participants (API and sign-in page), workers and the
metrics scraper. The address is the peer's (an IPv6 one's /64), or the one a proxy named in
``X-Forwarded-For`` when the peer is a proxy the host trusts
(``grader serve --trusted-proxy``; none by default). The API and ``/metrics``
read the token from ``Authorization: Bearer``; the sign-in page reads it from its
form and then keeps the participant in a signed session cookie (Starlette's
SessionMiddleware: HttpOnly, SameSite=strict, key in keys/session.secret, 0600)
with a fingerprint of the token digest, so a revoked or re-issued token ends the
session, and the id of a session stored on the server, which sign-out ends. Routes take one of the annotated dependencies below; none reads a token
itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from grader.hosting.api.deps import context
from grader.hosting.identity.auth import by_session, by_token, end_session, participant_of_person, start_session
from grader.hosting.identity.principal import Principal, Role
from grader.hosting.identity.ratelimit import client_bucket

REFUSED = {
    Role.PARTICIPANT: "missing, unknown or revoked token",
    Role.WORKER: "missing, unknown or revoked token",
    Role.METRICS: "missing or wrong metrics token (`grader admin metrics-token` creates one)",
}


#: The answer to a person of the server who is not a participant of this competition.
NOT_REGISTERED = "not found: this token is not registered in this competition"


def _address(request: Request) -> str:
    """The limiter's key of the caller: its address, an IPv6 one's /64 (:func:`client_bucket`)."""
    return client_bucket(request.client.host) if request.client else "unknown"


def bearer(request: Request) -> str:
    """The token of an ``Authorization: Bearer`` header ("" when there is none)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def verify(request: Request, role: Role, token: str) -> Principal:
    """The holder of ``token`` in ``role``; otherwise 429 while the caller's address is blocked in the role's bucket, else 401 (a failure counted)."""
    ctx = context(request)
    found = by_token(ctx.db, role, token) if token else None
    if found is not None:
        return found
    if role is Role.PARTICIPANT and ctx.people is not None and ctx.people.holds(token):
        # A person of this server, not registered in this competition: nothing of it is theirs. Not a failure either
        # (a valid credential is never counted towards a lock-out).
        raise HTTPException(404, NOT_REGISTERED)
    bucket = f"{role.value} {_address(request)}"
    wait = ctx.limiter.blocked_for(bucket)
    if wait > 0:
        raise HTTPException(
            429, f"too many failed sign-ins from this address; try again in {wait:.0f} s", headers={"Retry-After": str(int(wait) + 1)}
        )
    ctx.limiter.failed(bucket)
    raise HTTPException(401, REFUSED[role], headers={"WWW-Authenticate": "Bearer"})


def _bearer_of(role: Role) -> Callable[[Request], Awaitable[Principal]]:
    async def dependency(request: Request) -> Principal:
        # The lookup touches the database: off the event loop.
        return await run_in_threadpool(verify, request, role, bearer(request))

    dependency.__doc__ = f"The {role.value} whose bearer token the request carries (401 otherwise; 429 after repeated failures)."
    return dependency


def signed_in(request: Request) -> Principal | None:
    """The participant of the web session, while their token is still the one signed in with; None otherwise.

    On a server of many competitions the session is the person's (one sign-in, the server's cookie): the participant
    is the one the person is in this competition.
    """
    people = context(request).people
    if people is not None:
        person_sid, person_fingerprint = request.session.get("person_sid"), request.session.get("fingerprint")
        if not isinstance(person_sid, str) or not isinstance(person_fingerprint, str):
            return None
        person = people.signed_in(person_sid, person_fingerprint)
        return None if person is None else participant_of_person(context(request).db, *person)
    pid, fingerprint, session_id = request.session.get("participant"), request.session.get("fingerprint"), request.session.get("sid")
    if not isinstance(pid, int) or not isinstance(fingerprint, str) or not isinstance(session_id, str):
        return None
    return by_session(context(request).db, pid, fingerprint, session_id)


def require_signed_in(request: Request) -> Principal:
    """The participant of the web session (401 when not signed in)."""
    who = signed_in(request)
    if who is None:
        raise HTTPException(401, "sign in first (/signin)")
    return who


def sign_in(request: Request, token: str) -> Principal:
    """Check a token typed into the sign-in page (as :func:`verify`) and start a fresh web session for its participant."""
    who = verify(request, Role.PARTICIPANT, token)
    request.session.clear()  # a fresh session (and CSRF token) at sign-in
    people = context(request).people
    if people is not None:  # a server of many competitions: the person signs in, in every competition of theirs
        started = people.start_session(token)
        if started is None:  # a participant who is no person of the server (registered before people existed)
            raise HTTPException(401, REFUSED[Role.PARTICIPANT], headers={"WWW-Authenticate": "Bearer"})
        person_sid, person_fingerprint = started
        request.session.update(person_sid=person_sid, fingerprint=person_fingerprint, csrf=secrets.token_urlsafe(32))
        return who
    session_id = start_session(context(request).db, who.id)
    request.session.update(participant=who.id, fingerprint=who.fingerprint, sid=session_id, csrf=secrets.token_urlsafe(32))
    return who


def person_session(request: Request) -> tuple[str, str] | None:
    """The person's web session the cookie names (its id and token fingerprint), on a server of many competitions;
    whether it is live is the server database's to say."""
    person_sid, fingerprint = request.session.get("person_sid"), request.session.get("fingerprint")
    if context(request).people is None or not isinstance(person_sid, str) or not isinstance(fingerprint, str):
        return None
    return person_sid, fingerprint


def signup_address(request: Request) -> str:
    """The key under which the caller's sign-ups are counted: its address (an IPv6 one's /64)."""
    return f"signup {_address(request)}"


def sign_out(request: Request) -> None:
    """End the web session on the server (a replayed cookie is refused) and clear the cookie."""
    people = context(request).people
    person_sid = request.session.get("person_sid")
    if people is not None and isinstance(person_sid, str):
        people.end_session(person_sid)
    session_id = request.session.get("sid")
    if isinstance(session_id, str):
        end_session(context(request).db, session_id)
    request.session.clear()


#: Route parameters: the authenticated participant, worker or metrics scraper (bearer token), or the signed-in web participant.
CurrentParticipant = Annotated[Principal, Depends(_bearer_of(Role.PARTICIPANT))]
CurrentWorker = Annotated[Principal, Depends(_bearer_of(Role.WORKER))]
MetricsReader = Annotated[Principal, Depends(_bearer_of(Role.METRICS))]
WebParticipant = Annotated[Principal, Depends(require_signed_in)]
MaybeSignedIn = Annotated[Principal | None, Depends(signed_in)]
