"""`grader submit`'s resumable uploads: the same bytes under the same key, from the last byte the server holds.

A resumed upload must send exactly the bytes it started with, and packing is not
reproducible (gzip and tar record times; a Docker image is saved anew). So the
archive is kept, with its key, until the upload completes: in a pending folder
per server, track and submission (``$GRADER_UPLOADS``, by default
``$XDG_CACHE_HOME/grader/uploads`` or ``~/.cache/grader/uploads``; 0700). A re-run
of ``grader submit`` for the same submission finds it and resumes when the
submission's files are unchanged (their digest is kept beside the archive; a
Docker image named by reference is not in that digest: re-tagging it between the
runs resumes the archive packed first), and packs anew otherwise. Completed or
refused, the pending folder is removed.

The protocol is tus 1.0 (grader/hosting/api/routes/resumable.py): create (POST
with ``Upload-Length``, the key as ``Idempotency-Key`` and the archive's SHA-256 in
``Upload-Metadata``; creating again under the key answers the same upload), ask the
offset (HEAD), send the rest (PATCH at ``Upload-Offset``), again after a broken
connection or a 409 (another PATCH of the upload still held by the server).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from grader import jsonio
from grader.errors import GraderError
from grader.hosting.environment import environment
from grader.hosting.errors import ClientError

TUS_VERSION = "1.0.0"
RECORD = "upload.json"
ARCHIVE = "submission.tar.gz"


def uploads_home() -> Path:
    """The folder of pending uploads: ``$GRADER_UPLOADS``, else the user's cache folder."""
    env = environment()
    if env.uploads:
        return Path(env.uploads)
    return Path(env.cache_home or Path.home() / ".cache") / "grader" / "uploads"


def files_digest(submission: Path) -> str:
    """A digest of the submission as given: its files' relative paths, modes and bytes (a file: its bytes)."""
    digest = hashlib.sha256()
    paths = [submission] if submission.is_file() else sorted(p for p in submission.rglob("*") if p.is_file() or p.is_symlink())
    for path in paths:
        digest.update(f"{path.relative_to(submission) if path != submission else ''}\0{path.lstat().st_mode:o}\0".encode())
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
        digest.update(b"\1")
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Pending:
    """An upload to finish: its kept archive, key, length and SHA-256."""

    folder: Path
    key: str
    length: int
    sha256: str

    @property
    def archive(self) -> Path:
        return self.folder / ARCHIVE

    def discard(self) -> None:
        """Forget it (completed or refused): the next run packs anew."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _folder(server: str, sample: bool, submission: Path) -> Path:
    name = hashlib.sha256(f"{server.rstrip('/')}\n{sample}\n{submission.resolve()}".encode()).hexdigest()[:32]
    return uploads_home() / name


def kept_upload(server: str, sample: bool, submission: Path) -> Pending | None:
    """The upload of ``submission`` to ``server`` an earlier run started and did not finish, if its files are unchanged."""
    folder = _folder(server, sample, submission)
    record = folder / RECORD
    if not record.is_file():
        return None
    try:
        kept = jsonio.load_file(record, max_bytes=64 << 10)
        pending = Pending(folder, str(kept["key"]), int(kept["length"]), str(kept["sha256"]))
        if kept.get("files") == files_digest(submission) and pending.archive.stat().st_size == pending.length:
            return pending
    except (OSError, GraderError, ValueError, KeyError, TypeError, AttributeError):
        pass  # a record this version cannot read: packed anew
    return None


def new_upload(server: str, sample: bool, submission: Path, pack: Callable[[Path], None]) -> Pending:
    """A new upload of ``submission`` to ``server``: packed by ``pack(target)`` into its folder, with a fresh key, kept until it completes."""
    folder = _folder(server, sample, submission)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)
    archive = folder / ARCHIVE
    pack(archive)
    pending = Pending(folder, secrets.token_hex(16), archive.stat().st_size, _sha256(archive))
    fields = {
        "key": pending.key,
        "length": pending.length,
        "sha256": pending.sha256,
        "files": files_digest(submission),
        "server": server,
        "sample": sample,
    }
    jsonio.write_json(folder / RECORD, fields, mode=0o600)  # atomically, and last: a folder without it is packed anew
    return pending


def creation_headers(pending: Pending) -> dict[str, str]:
    """The tus creation headers of ``pending``: its length, key and SHA-256 (checked by the server at completion)."""
    sha = base64.b64encode(pending.sha256.encode("ascii")).decode("ascii")
    return {"Tus-Resumable": TUS_VERSION, "Upload-Length": str(pending.length), "Idempotency-Key": pending.key, "Upload-Metadata": f"sha256 {sha}"}


def chunks_from(path: Path, offset: int, progress: Callable[[int, int], None] | None, total: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of ``path`` from ``offset``, telling ``progress`` (bytes the server will hold, total) as they go."""
    sent = offset
    with open(path, "rb") as handle:
        handle.seek(offset)
        while block := handle.read(chunk):
            sent += len(block)
            if progress is not None:
                progress(sent, total)
            yield block


@dataclass
class Backoff:
    """Tries without progress, bounded: reset whenever the server holds more bytes than before."""

    attempts: int = 8
    first_delay_s: float = 0.5
    max_delay_s: float = 5.0
    failures: int = 0
    best: int = -1

    def progressed(self, offset: int) -> None:
        if offset > self.best:
            self.best, self.failures = offset, 0

    def failed(self, what: str) -> None:
        """Wait before the next try; :class:`ClientError` after ``attempts`` tries in a row without progress."""
        self.failures += 1
        if self.failures > self.attempts:
            raise ClientError(f"the upload made no progress after {self.attempts} tries ({what}); run the same `grader submit` again to resume it")
        time.sleep(min(self.max_delay_s, self.first_delay_s * 2 ** (self.failures - 1)))


TRANSPORT_ERRORS = (httpx.TransportError,)
