"""Resumable uploads (tus 1.0 core, creation and termination) on the same intake as the one-shot upload.

An upload is created with its declared length before a byte of it is sent, and
that creation is the admission of :mod:`grader.hosting.intake.uploads`: the
length is held to ``upload.max_bytes`` (413), and the window, quotas, stored-bytes
quota and concurrency are checked and an :class:`UploadReservation` written in
the serialised admission transaction. The upload's bytes go to a partial file in
the state folder (``uploads/partial/<participant>-<key>.tar.gz``), appended by one
PATCH at a time; the reservation lives ``upload.reservation_s`` past the last
progress (each PATCH renews it once a second while bytes arrive), so a partial
upload counts, in flight and in stored bytes, while it is held and no longer: an
expired one is swept at the participant's next admission, and its file removed
at its next PATCH or the participant's next creation.

One PATCH at a time: a PATCH holds an exclusive ``flock`` on the partial file
while it reads; another one meanwhile is answered 409 before its body is read.
A PATCH that receives nothing for ``upload.stall_s`` ends itself (what it wrote
is kept), so a connection dropped unseen frees the upload within that time.
A lock, not the reservation's ``arrived_at`` mark: it is released by the kernel
when the process holding it dies, so a restarted server resumes at once.

Complete (offset = length), the partial file is checked (its SHA-256 against the
one declared in the metadata, if any) and committed by
:func:`grader.hosting.intake.submissions.create_submission` under the upload's
key, exactly as a one-shot upload's body: the unpack ratio, the quotas and the
idempotency key hold, and however often the last PATCH is retried there is one
submission (the key is unique per participant, and a retry finds it).
"""

from __future__ import annotations

import base64
import binascii
import errno
import fcntl
import hashlib
import os
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
from sqlalchemy import select
from starlette.requests import ClientDisconnect

from grader.hosting.clock import utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Submission, UploadReservation
from grader.hosting.errors import RefusedSubmission
from grader.hosting.identity.principal import Principal
from grader.hosting.intake.refusals import too_large
from grader.hosting.intake.submissions import create_submission
from grader.hosting.intake.uploads import REFRESH_S, Admission, UploadHead, admit, refresh, release
from grader.hosting.storage import StoredUpload

_KEY = re.compile(r"[A-Za-z0-9_-]{16,64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: The most metadata pairs and bytes read from ``Upload-Metadata`` (the header is bounded by the HTTP server too).
METADATA_BYTES = 4096
_CHUNK = 1 << 20


class UploadGone(RefusedSubmission):
    """No such upload (never created, terminated, refused or expired): tus clients then create a new one."""

    def __init__(self) -> None:
        super().__init__("no such upload: it was never created, was terminated, or expired; create a new one", status=404)


@dataclass(frozen=True)
class Progress:
    """Where an upload stands: bytes held, bytes declared, and its submission once complete."""

    offset: int
    length: int
    submission: Submission | None = None


def parse_metadata(header: str | None) -> dict[str, str]:
    """``Upload-Metadata`` (comma-separated ``key base64value`` pairs) as text; 400 when malformed or too long."""
    if not header:
        return {}
    if len(header) > METADATA_BYTES:
        raise RefusedSubmission("Upload-Metadata is too long", status=400)
    pairs: dict[str, str] = {}
    for item in header.split(","):
        name, _, value = item.strip().partition(" ")
        try:
            pairs[name] = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise RefusedSubmission(f"Upload-Metadata: the value of {name!r} is not base64 of UTF-8 text", status=400) from None
    return pairs


def read_length(header: str | None, max_bytes: int) -> int:
    """``Upload-Length``: required (a deferred length is not offered), digits only, at most ``max_bytes`` (413)."""
    if header is None:
        raise RefusedSubmission("a resumable upload must declare its Upload-Length (deferred lengths are not offered)", status=400)
    if not header.isdigit() or len(header) > 15:
        raise RefusedSubmission("malformed Upload-Length", status=400)
    length = int(header)
    if length > max_bytes:
        raise too_large(length, max_bytes)
    return length


def new_key(given: str | None) -> str:
    """The upload's key: the client's (``Idempotency-Key`` or metadata ``key``), checked, or a fresh random one."""
    if given is None:
        return secrets.token_hex(16)
    if not _KEY.fullmatch(given):
        raise RefusedSubmission("an upload key must be 16 to 64 letters, digits, '-' or '_'", status=400)
    return given


def declared_sha256(metadata: dict[str, str]) -> str | None:
    """The archive's SHA-256 the client declared (metadata ``sha256``, 64 lowercase hex), if it did."""
    value = metadata.get("sha256")
    if value is None:
        return None
    if not _HEX64.fullmatch(value):
        raise RefusedSubmission("Upload-Metadata sha256 must be 64 lowercase hex digits", status=400)
    return value


def partial_path(ctx: ServerContext, participant_id: int, key: str) -> Path:
    """Where the bytes of ``key``'s upload wait (in the private state folder; not swept at start, unlike ``uploads/tmp``)."""
    return ctx.state.uploads / "partial" / f"{participant_id}-{key}.tar.gz"  # the suffix the archive check reads


def _held(ctx: ServerContext, participant_id: int, key: str) -> UploadReservation | None:
    with ctx.db.session() as session:
        row = session.scalar(
            select(UploadReservation).where(UploadReservation.participant_id == participant_id, UploadReservation.idempotency_key == key)
        )
        if row is None or row.expires_at <= utcnow():
            return None
        session.expunge(row)
        return row


def _submission(ctx: ServerContext, participant_id: int, key: str) -> Submission | None:
    with ctx.db.session() as session:
        found = session.scalar(select(Submission).where(Submission.participant_id == participant_id, Submission.idempotency_key == key))
        if found is not None:
            session.expunge(found)
        return found


def _sweep_partials(ctx: ServerContext, participant_id: int) -> None:
    """Remove the participant's partial files whose reservation is gone (expired, refused, terminated)."""
    folder = ctx.state.uploads / "partial"
    if not folder.is_dir():
        return
    for path in folder.glob(f"{participant_id}-*.tar.gz"):
        key = path.name[len(f"{participant_id}-") : -len(".tar.gz")]
        if _held(ctx, participant_id, key) is None:
            path.unlink(missing_ok=True)


def create(ctx: ServerContext, participant: Principal, track: str, length: int, key: str, sha256: str | None) -> str:
    """Admit a resumable upload of ``length`` bytes under ``key`` before any byte of it; return the key.

    Creating again under a key already held (a creation whose answer was lost) answers the same
    upload; under a key whose upload is complete, the same too (its HEAD then says complete).
    Another length, track or digest under the key is 409.
    """
    held = _held(ctx, participant.id, key)
    if held is not None:
        if held.declared_bytes != length or held.track != track or held.body_sha256 != (sha256 or ""):
            raise RefusedSubmission("this upload key was used for another upload (length, track or digest); use a new key", status=409)
        return key
    done = _submission(ctx, participant.id, key)
    if done is not None:
        if done.upload_bytes != length or done.track != track or (sha256 is not None and done.upload_sha256 != sha256):
            raise RefusedSubmission("this upload key was used for another upload (length, track or digest); use a new key", status=409)
        return key
    _sweep_partials(ctx, participant.id)
    # Keyed, with the declared digest or none: admit's checks of a repeated key were answered above.
    admit(ctx, participant, track, UploadHead(length, key, sha256, keyed=True))
    path = partial_path(ctx, participant.id, key)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.unlink(missing_ok=True)  # a leftover of an earlier, expired upload under this key
    path.touch(mode=0o600)
    return key


def progress(ctx: ServerContext, participant: Principal, key: str) -> Progress:
    """Where ``key``'s upload stands (HEAD); :class:`UploadGone` when there is none."""
    held = _held(ctx, participant.id, key)
    path = partial_path(ctx, participant.id, key)
    if held is not None and path.exists():
        return Progress(path.stat().st_size, held.declared_bytes)
    done = _submission(ctx, participant.id, key)
    if done is not None:
        return Progress(done.upload_bytes, done.upload_bytes, done)
    raise UploadGone  # its bytes, if any are left, go at the next PATCH or creation (a read writes nothing)


def terminate(ctx: ServerContext, participant: Principal, key: str) -> None:
    """Drop ``key``'s upload (DELETE): its reservation and its bytes; :class:`UploadGone` when there is none."""
    held = _held(ctx, participant.id, key)
    if held is None:
        raise UploadGone
    release(ctx, Admission(UploadHead(held.declared_bytes, key, held.body_sha256 or None, keyed=True), participant.id, held.holder))
    partial_path(ctx, participant.id, key).unlink(missing_ok=True)


def _lock(path: Path) -> int:
    """An exclusive, non-blocking lock on ``path`` (opened for appending); 409 while another PATCH holds it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:
        raise UploadGone from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise RefusedSubmission("another PATCH of this upload is in progress; ask its offset (HEAD) and send again", status=409) from None
        raise
    return fd


def _sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


async def append(ctx: ServerContext, participant: Principal, key: str, offset: int, declared: int | None, body: AsyncIterator[bytes]) -> Progress:
    """One PATCH: append ``body`` at ``offset`` to ``key``'s upload; commit the submission once it is complete.

    Refused before a byte is read: no such upload (404), another PATCH in progress or an offset that
    is not the upload's (409), a ``declared`` length past the upload's end (413). While reading: bytes past
    the declared length end it 413 (what came before them is kept). A client that breaks off keeps what arrived.
    """
    held = await anyio.to_thread.run_sync(_held, ctx, participant.id, key)
    if held is None:
        done = await anyio.to_thread.run_sync(_submission, ctx, participant.id, key)
        if done is not None and offset == done.upload_bytes:  # the last PATCH's answer was lost: it committed
            return Progress(done.upload_bytes, done.upload_bytes, done)
        if done is None:  # expired, refused or terminated: what was held of it goes
            partial_path(ctx, participant.id, key).unlink(missing_ok=True)
        raise UploadGone
    path = partial_path(ctx, participant.id, key)
    admission = Admission(UploadHead(held.declared_bytes, key, held.body_sha256 or None, keyed=True), participant.id, held.holder)
    fd = _lock(path)
    try:
        size = os.fstat(fd).st_size
        if offset != size:
            raise RefusedSubmission(f"Upload-Offset {offset} is not this upload's offset, {size}; ask it (HEAD)", status=409)
        room = held.declared_bytes - size
        if declared is not None and declared > room:
            raise RefusedSubmission(f"this PATCH sends {declared} bytes past the upload's declared Upload-Length ({room} left)", status=413)
        received = await _receive(ctx, admission, fd, size, held.declared_bytes, body)
        if received < held.declared_bytes:
            # The upload's last progress: it expires reservation_s from now (a fast PATCH may have renewed nothing yet).
            if received > size and not await anyio.to_thread.run_sync(partial(refresh, ctx, admission, progressed=True)):
                raise UploadGone
            return Progress(received, held.declared_bytes)
        return await _complete(ctx, participant, held, admission, path)
    finally:
        os.close(fd)  # releases the lock


async def _receive(ctx: ServerContext, admission: Admission, fd: int, size: int, length: int, body: AsyncIterator[bytes]) -> int:
    """Append ``body`` to ``fd`` until it ends, breaks off or stalls for ``upload.stall_s``; the new size.

    The reservation is renewed at most once a second while bytes arrive (:data:`REFRESH_S`); once it is
    lost (expired and swept) the PATCH ends with :class:`UploadGone`. What was written stays: the client resumes from it.
    """
    stall_s = ctx.competition.unpack.stall_s
    chunks = body.__aiter__()
    renewed = anyio.current_time()
    try:
        while True:
            with anyio.move_on_after(stall_s) as waiting:
                try:
                    chunk = await chunks.__anext__()
                except (StopAsyncIteration, ClientDisconnect):
                    break
            if waiting.cancelled_caught:  # a PATCH that sends nothing ends, so a connection dropped unseen frees the upload
                break
            if size + len(chunk) > length:
                raise RefusedSubmission(f"bytes past the upload's declared Upload-Length ({length})", status=413)
            await anyio.to_thread.run_sync(_write_all, fd, chunk)
            size += len(chunk)
            if anyio.current_time() - renewed >= REFRESH_S:
                renewed = anyio.current_time()
                if not await anyio.to_thread.run_sync(partial(refresh, ctx, admission, progressed=True)):
                    raise UploadGone
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(os.fsync, fd)
    return size


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _complete(ctx: ServerContext, participant: Principal, held: UploadReservation, admission: Admission, path: Path) -> Progress:
    """Check the complete partial file and commit it as the key's submission (exactly once); its refusals release the reservation."""
    try:
        sha256 = await anyio.to_thread.run_sync(_sha256_of_file, path)
        if held.body_sha256 and sha256 != held.body_sha256:
            path.unlink(missing_ok=True)
            raise RefusedSubmission("the uploaded bytes do not match the sha256 declared in Upload-Metadata", status=400)
        upload = StoredUpload(path, sha256, held.declared_bytes)
        submission, _ = await anyio.to_thread.run_sync(
            lambda: create_submission(
                ctx, participant, held.track, upload, idempotency_key=held.idempotency_key, reservation_key=held.idempotency_key, holder=held.holder
            )
        )
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(release, ctx, admission)
        raise
    return Progress(submission.upload_bytes, submission.upload_bytes, submission)
