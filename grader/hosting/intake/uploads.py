"""Receiving an upload: admitted before its body is read, idempotent under retries.

The headers decide admission. ``Content-Length`` is required (411 otherwise) and
bounded by the competition's cap (413). Window, quotas and concurrency are
checked, and an :class:`UploadReservation` row written, in one serialised
transaction (:func:`grader.hosting.intake.quotas.lock_admission`) before the
first byte of the body is read: concurrent uploads see each other's reservations,
so no more of them are received and unpacked than the participant may have in
flight. A reservation lives ``upload.reservation_s`` past the last progress of its
upload (a server killed mid-upload leaks nothing for longer); a participant's
expired ones are swept at its next admission.

An upload may carry an ``Idempotency-Key`` (the client generates a random 128-bit
one per upload) with the body's ``Content-Digest`` (``sha-256=:<base64>:``, RFC 9530).
The key is stored with the submission, unique per participant. Sent again:

* the submission exists: the first upload's submission is answered (200 instead of
  201); the body is read and dropped, nothing is stored or charged a second time;
* the upload is still in progress (a reservation): the retry takes the reservation
  over, and whichever copy completes first commits; the other gets the same answer;
* with another body (another digest): 409.

An upload without a key is admitted the same way, under a key of the server's, and
is never matched to another.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

import anyio
from sqlalchemy import delete, select, update

from grader.hosting.clock import utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Submission, UploadReservation
from grader.hosting.errors import RefusedSubmission
from grader.hosting.identity.principal import Principal
from grader.hosting.intake.quotas import check_quota, lock_admission
from grader.hosting.intake.refusals import too_large
from grader.hosting.intake.submissions import create_submission
from grader.hosting.schedule import ends_at

KEY_HEADER = "Idempotency-Key"
DIGEST_HEADER = "Content-Digest"
_KEY = re.compile(r"[A-Za-z0-9_-]{16,64}")
_SHA256 = re.compile(r"(?:^|,)\s*sha-256=:([A-Za-z0-9+/]+=*):")


@dataclass(frozen=True)
class UploadHead:
    """What an upload's headers declare: its length, its key, and the SHA-256 of its body (when declared)."""

    declared_bytes: int
    key: str
    body_sha256: str | None
    #: Whether the key is the client's (stored with the submission, matched on retries) or the server's own.
    keyed: bool


@dataclass(frozen=True)
class Admission:
    """An admitted upload (its reservation and which request holds it), or the submission its key already became."""

    head: UploadHead
    participant_id: int
    holder: str
    existing: Submission | None = None


def read_head(headers: Mapping[str, str], max_bytes: int) -> UploadHead:
    """The upload's declarations, or the refusal they earn (411, 413, 400) before anything else is done."""
    length = headers.get("content-length")
    if length is None:
        raise RefusedSubmission("an upload must declare its Content-Length (grader submit does)", status=411)
    if not length.isdigit() or len(length) > 15:
        raise RefusedSubmission("malformed Content-Length", status=400)
    declared = int(length)
    if declared > max_bytes:
        raise too_large(declared, max_bytes)
    digest_header = headers.get(DIGEST_HEADER.lower())
    body_sha256 = None if digest_header is None else _sha256_of(digest_header)
    key = headers.get(KEY_HEADER.lower())
    if key is None:
        return UploadHead(declared, secrets.token_hex(16), body_sha256, keyed=False)
    if not _KEY.fullmatch(key):
        raise RefusedSubmission(f"{KEY_HEADER} must be 16 to 64 letters, digits, '-' or '_'", status=400)
    if body_sha256 is None:
        raise RefusedSubmission(f"an upload with an {KEY_HEADER} must declare its body's {DIGEST_HEADER} (sha-256)", status=400)
    return UploadHead(declared, key, body_sha256, keyed=True)


def _sha256_of(header: str) -> str:
    found = _SHA256.search(header[:1000])
    if found is None:
        raise RefusedSubmission(f"{DIGEST_HEADER} must carry a sha-256 digest (sha-256=:<base64>:)", status=400)
    try:
        raw = base64.b64decode(found.group(1), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise RefusedSubmission(f"{DIGEST_HEADER}: the sha-256 digest is not 32 bytes of base64", status=400)
    return raw.hex()


def admit(ctx: ServerContext, participant: Principal, track: str, head: UploadHead) -> Admission:
    """Admit an upload before its body is read: answer its key's submission, take its reservation over, or reserve.

    Raises :class:`RefusedSubmission` (409 for a key reused with another body; the
    window's 403 and the quotas' 429, counting the other uploads in progress).
    """
    now = utcnow()
    end = ends_at(ctx.db, ctx.competition)
    holder = secrets.token_hex(8)
    expires = now + timedelta(seconds=ctx.competition.unpack.reservation_s)
    with ctx.db.session() as session:
        lock_admission(session, participant.id)
        # The participant's own expired rows only: they are what its lock guards (no contention with other admissions).
        session.execute(delete(UploadReservation).where(UploadReservation.participant_id == participant.id, UploadReservation.expires_at <= now))
        if head.keyed:
            existing = session.scalar(select(Submission).where(Submission.participant_id == participant.id, Submission.idempotency_key == head.key))
            if existing is not None:
                if existing.upload_sha256 != head.body_sha256 or existing.track != track:
                    raise _reused_key()
                return Admission(head, participant.id, holder, existing=existing)
            held = session.scalar(
                select(UploadReservation).where(UploadReservation.participant_id == participant.id, UploadReservation.idempotency_key == head.key)
            )
            if held is not None:
                if held.body_sha256 != head.body_sha256 or held.track != track:
                    raise _reused_key()
                # A retry of an upload whose connection broke: it takes the reservation over (the first copy may still
                # be arriving on a connection the server has not seen break; whichever completes first commits).
                held.holder, held.expires_at, held.declared_bytes = holder, expires, head.declared_bytes
                return Admission(head, participant.id, holder)
        check_quota(session, ctx.competition, participant.id, track, now, end, incoming_bytes=head.declared_bytes)
        session.add(
            UploadReservation(
                participant_id=participant.id,
                idempotency_key=head.key,
                track=track,
                body_sha256=head.body_sha256 or "",
                declared_bytes=head.declared_bytes,
                holder=holder,
                created_at=now,
                expires_at=expires,
            )
        )
    return Admission(head, participant.id, holder)


def _reused_key() -> RefusedSubmission:
    return RefusedSubmission(f"this {KEY_HEADER} was used for another upload (another body or track); a new upload needs a new key", status=409)


def extend(ctx: ServerContext, admission: Admission) -> None:
    """Push the reservation's expiry ``reservation_s`` past now (the upload is progressing); a no-op once taken over."""
    with ctx.db.session() as session:
        session.execute(
            update(UploadReservation)
            .where(
                UploadReservation.participant_id == admission.participant_id,
                UploadReservation.idempotency_key == admission.head.key,
                UploadReservation.holder == admission.holder,
            )
            .values(expires_at=utcnow() + timedelta(seconds=ctx.competition.unpack.reservation_s))
        )


def release(ctx: ServerContext, admission: Admission) -> None:
    """Drop the reservation of an upload that failed or was refused, unless a retry holds it now."""
    with ctx.db.session() as session:
        session.execute(
            delete(UploadReservation).where(
                UploadReservation.participant_id == admission.participant_id,
                UploadReservation.idempotency_key == admission.head.key,
                UploadReservation.holder == admission.holder,
            )
        )


async def _kept_alive(ctx: ServerContext, admission: Admission, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks``, renewing the reservation every quarter of its life while they keep coming."""
    every = ctx.competition.unpack.reservation_s / 4
    last = time.monotonic()
    async for chunk in chunks:
        if time.monotonic() - last > every:
            await anyio.to_thread.run_sync(extend, ctx, admission)
            last = time.monotonic()
        yield chunk


async def receive_submission(
    ctx: ServerContext, participant: Principal, track: str, headers: Mapping[str, str], body: AsyncIterator[bytes]
) -> tuple[Submission, bool]:
    """Admit, receive and commit one upload; return its submission and whether it is new (False: a repeated key).

    Raises :class:`RefusedSubmission` with the HTTP status of the refusal; the reservation
    is released on every path that does not commit (a refusal, a broken connection).
    """
    head = read_head(headers, ctx.competition.upload_max_bytes)
    admission = await anyio.to_thread.run_sync(admit, ctx, participant, track, head)
    if admission.existing is not None:
        # Read (and drop) the retried body before answering: an answer sent while the client is still sending would
        # end the exchange early, and a slow client could see the connection closed under it and try again in vain.
        async for _chunk in body:
            pass
        return admission.existing, False
    try:
        upload = await ctx.state.receive(_kept_alive(ctx, admission, body), ctx.competition.upload_max_bytes)
        if upload.size != head.declared_bytes or (head.body_sha256 is not None and upload.sha256 != head.body_sha256):
            upload.path.unlink(missing_ok=True)
            raise RefusedSubmission(f"the body does not match its Content-Length or {DIGEST_HEADER}", status=400)
        return await anyio.to_thread.run_sync(
            lambda: create_submission(ctx, participant, track, upload, idempotency_key=head.key if head.keyed else None, reservation_key=head.key)
        )
    except BaseException:
        with anyio.CancelScope(shield=True):  # a cancelled request (the server stopping) still releases what it held
            await anyio.to_thread.run_sync(release, ctx, admission)
        raise
