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
The key is stored with the submission, unique per participant. One key, one body
read at a time. Sent again:

* the submission exists: the first upload's submission is answered (200 instead of
  201) before a byte of the body is read; nothing is stored or charged a second time;
* another copy is "arriving" (its reservation's ``arrived_at`` is less than
  ``upload.stall_s`` old: its bytes came, or its check ran, that recently): 409
  "in progress" with ``Retry-After``, before a byte of the body is read;
* the other copy has stalled: the retry takes the reservation over (no quota
  check: the slot is the same one). The stalled copy notices within a second,
  whether or not its bytes still come (it checks that it still holds the
  reservation), stops reading, removes its temporary file and ends 409;
* with another body (another digest): 409.

The mark is refreshed at most once a second per copy (:data:`REFRESH_S`): an
upload in progress costs one small ``UPDATE`` a second while it arrives or is
checked, and one ``SELECT`` a second while it sends nothing.

An upload without a key is admitted the same way, under a key of the server's, and
is never matched to another.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

import anyio
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Submission, UploadReservation
from grader.hosting.errors import RefusedSubmission, UploadInProgress, UploadTakenOver
from grader.hosting.identity.principal import Principal
from grader.hosting.intake import refusals
from grader.hosting.intake.quotas import check_quota, lock_admission
from grader.hosting.intake.refusals import too_large, track_refusal
from grader.hosting.intake.submissions import create_submission
from grader.hosting.schedule import ends_at
from grader.hosting.states import Track
from grader.hosting.storage import StoredUpload

KEY_HEADER = "Idempotency-Key"
DIGEST_HEADER = "Content-Digest"
_KEY = re.compile(r"[A-Za-z0-9_-]{16,64}")
_SHA256 = re.compile(r"(?:^|,)\s*sha-256=:([A-Za-z0-9+/]+=*):")
#: How often a copy in progress refreshes its reservation's mark (or, sending nothing, checks it still holds it).
REFRESH_S = 1.0
T = TypeVar("T")


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


def named_phase_refusal(ctx: ServerContext, track: str, named: str | None) -> RefusedSubmission | None:
    """The refusal of an upload meant for phase ``named`` (``grader submit --phase``; None: the open one) before its body
    is read: unless ``named`` is open now (docs/hosting.md#phases). Sample runs are phase-independent: never named."""
    return refusals.named_phase_refusal(ctx.competition.phases, utcnow(), named, sample=track == Track.SAMPLE)


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
    """Admit an upload before its body is read: answer its key's submission, take a stalled copy's reservation over, or reserve.

    Raises :class:`RefusedSubmission` (409 for a key reused with another body; the
    window's 403, a sample run's 403 without a sample split, and the quotas' 429, counting the other uploads in progress) and
    :class:`UploadInProgress` (409) while another copy under the key is arriving.
    """
    if (refusal := track_refusal(track, ctx.sample_split)) is not None:
        raise refusal
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
                _take_over(session, held, holder, now, expires, ctx.competition.unpack.stall_s)
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
                arrived_at=now,
            )
        )
    return Admission(head, participant.id, holder)


def _take_over(session: Session, held: UploadReservation, holder: str, now: datetime, expires: datetime, stall_s: float) -> None:
    """Hand ``held`` to ``holder`` if its copy has stalled; :class:`UploadInProgress` while that copy is arriving.

    A compare-and-set on the holder and the mark: a refresh committed by the other copy
    after ``held`` was read (it does not take the admission lock) keeps the reservation its own.
    """
    stalled_before = now - timedelta(seconds=stall_s)
    taken = session.execute(
        update(UploadReservation)
        .where(UploadReservation.id == held.id, UploadReservation.holder == held.holder, UploadReservation.arrived_at <= stalled_before)
        .values(holder=holder, arrived_at=now, expires_at=expires)
        .execution_options(synchronize_session=False)
    )
    if taken.rowcount != 1:  # type: ignore[attr-defined]
        session.refresh(held)
        free_at = max(held.arrived_at, now - timedelta(seconds=stall_s)) + timedelta(seconds=stall_s)
        raise UploadInProgress(
            f"another copy of this upload (same {KEY_HEADER}) is still arriving; send it again after {iso(free_at)}"
            " (it is answered then, or takes over a copy that has stalled)",
            retry_at=free_at,
        )


def _reused_key() -> RefusedSubmission:
    return RefusedSubmission(f"this {KEY_HEADER} was used for another upload (another body or track); a new upload needs a new key", status=409)


def refresh(ctx: ServerContext, admission: Admission, *, progressed: bool) -> bool:
    """Whether ``admission`` still holds its reservation; if it ``progressed``, mark it arriving now and push its expiry.

    False once a retry took the reservation over, or it expired (swept or not): a copy that
    sent nothing for ``reservation_s`` ends, rather than hold a connection the server may never see close.
    """
    mine = (
        UploadReservation.participant_id == admission.participant_id,
        UploadReservation.idempotency_key == admission.head.key,
        UploadReservation.holder == admission.holder,
    )
    with ctx.db.session() as session:
        now = utcnow()
        if not progressed:
            return session.scalar(select(UploadReservation.id).where(*mine, UploadReservation.expires_at > now)) is not None
        done = session.execute(
            update(UploadReservation).where(*mine).values(arrived_at=now, expires_at=now + timedelta(seconds=ctx.competition.unpack.reservation_s))
        )
        return bool(done.rowcount == 1)  # type: ignore[attr-defined]


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


@dataclass
class _Watch:
    """One copy's progress between two refreshes, and whether it lost its reservation."""

    progressed: bool = False
    lost: bool = False


async def _watch_reception(ctx: ServerContext, admission: Admission, watch: _Watch, reading: anyio.CancelScope) -> None:
    """Every :data:`REFRESH_S`: refresh the mark if bytes came, else check the reservation is still ours; stop the reading once it is not.

    Timed, not per chunk: a copy whose client sends nothing more learns of a takeover too.
    """
    while True:
        await anyio.sleep(REFRESH_S)
        progressed, watch.progressed = watch.progressed, False
        if not await anyio.to_thread.run_sync(partial(refresh, ctx, admission, progressed=progressed)):
            watch.lost = True
            reading.cancel()
            return


async def _counted(chunks: AsyncIterator[bytes], watch: _Watch) -> AsyncIterator[bytes]:
    """``chunks``, noting on ``watch`` that bytes came (the watch writes the mark, once a second at most)."""
    async for chunk in chunks:
        watch.progressed = True
        yield chunk


async def _alongside(main: Callable[[], Awaitable[T]], companion: Callable[[anyio.CancelScope], Coroutine[Any, Any, None]]) -> T:
    """``main()``, with ``companion`` running beside it until main ends; main's exception is raised as it is.

    The companion may cancel the scope it is given to stop main early (main then ends with the
    cancellation, raised here for the caller to tell apart). A bare task group would wrap main's
    refusals in an exception group, which the route does not translate.
    """
    result: list[T] = []
    failure: BaseException | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(companion, group.cancel_scope)
        try:
            result.append(await main())
        except BaseException as error:  # re-raised below, outside the group
            failure = error
        group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result[0]


async def _receive_held(ctx: ServerContext, admission: Admission, body: AsyncIterator[bytes]) -> StoredUpload:
    """The body in a temporary file, read while this copy holds its reservation; :class:`UploadTakenOver` once it does not (file removed)."""
    watch = _Watch()
    taken_over = UploadTakenOver(
        f"this copy of the upload stopped: a retry under its {KEY_HEADER} took its reservation over after"
        f" {ctx.competition.unpack.stall_s:g} s without progress (or the reservation expired)"
    )
    try:
        upload = await _alongside(
            lambda: ctx.state.receive(_counted(body, watch), ctx.competition.upload_max_bytes),  # removes its file when stopped
            lambda reading: _watch_reception(ctx, admission, watch, reading),
        )
    except BaseException:
        if watch.lost:  # the watch stopped the reading
            raise taken_over from None
        raise
    if watch.lost:  # lost just as the last bytes came
        upload.path.unlink(missing_ok=True)
        raise taken_over
    return upload


async def _while_held(ctx: ServerContext, admission: Admission, work: Callable[[], T]) -> T:
    """``work()`` in a thread, the reservation marked arriving every :data:`REFRESH_S` meanwhile (a check of a large
    body takes a while: a retry then waits for its answer instead of taking over and unpacking the body a second time)."""

    async def beat(_scope: anyio.CancelScope) -> None:
        while True:
            await anyio.sleep(REFRESH_S)
            await anyio.to_thread.run_sync(partial(refresh, ctx, admission, progressed=True))

    return await _alongside(lambda: anyio.to_thread.run_sync(work), beat)


async def receive_submission(
    ctx: ServerContext, participant: Principal, track: str, headers: Mapping[str, str], body: AsyncIterator[bytes]
) -> tuple[Submission, bool]:
    """Admit, receive and commit one upload; return its submission and whether it is new (False: a repeated key).

    Raises :class:`RefusedSubmission` with the HTTP status of the refusal; the reservation
    is released on every path that does not commit (a refusal, a broken connection) unless a retry holds it.
    A repeated key's submission, and a refusal on the headers, are answered before a byte of the body is read
    (the HTTP server drains and drops what the client still sends, and keeps the connection).
    """
    head = read_head(headers, ctx.competition.upload_max_bytes)
    admission = await anyio.to_thread.run_sync(admit, ctx, participant, track, head)
    if admission.existing is not None:
        return admission.existing, False
    try:
        upload = await _receive_held(ctx, admission, body)
        if upload.size != head.declared_bytes or (head.body_sha256 is not None and upload.sha256 != head.body_sha256):
            upload.path.unlink(missing_ok=True)
            raise RefusedSubmission(f"the body does not match its Content-Length or {DIGEST_HEADER}", status=400)
        return await _while_held(
            ctx,
            admission,
            lambda: create_submission(
                ctx, participant, track, upload, idempotency_key=head.key if head.keyed else None, reservation_key=head.key, holder=admission.holder
            ),
        )
    except BaseException:
        with anyio.CancelScope(shield=True):  # a cancelled request (the server stopping) still releases what it held
            await anyio.to_thread.run_sync(release, ctx, admission)
        raise
