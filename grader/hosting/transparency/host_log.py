"""The server's side of the transparency log that is not the database: its key, its secret, and the published checkpoint file.

The database holds the entries (``log_entries``, appended in the transactions of their events by
:mod:`grader.hosting.transparency.log_store`). After each commit that appended, the server signs a
checkpoint of the database's tree and writes it to ``<state>/log/checkpoint`` with compare-and-swap:
under an exclusive lock on ``log/checkpoint.lock`` it reads the file, refuses a database tree that is
shorter than it or does not extend it (same root at the file's size), and replaces it only by a
larger tree. Several server processes on one state folder therefore never move the file backwards,
and a database restored from an older copy is refused at the next start or signature
(docs/hosting.md, "Backups").
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.files import atomic_write_bytes
from grader.hosting.errors import HostingError
from grader.transparency.checkpoint import Checkpoint, open_checkpoint, sign_checkpoint
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import MemoryTree
from grader.transparency.note import MAX_NOTE_BYTES, NoteSigner, NoteVerifier

LOG_DIR = "log"
CHECKPOINT_FILE = "checkpoint"
_IDENTIFIER_LABEL = b"grader-log identifier key v1"


class LogStateError(HostingError):
    """The database's log and the published checkpoint disagree: the server refuses to start or sign."""


def identifier_key(partition_secret: bytes) -> bytes:
    """The key that hides identifiers in entries, derived from the partition secret (both are revealed at the end)."""
    return hmac.new(partition_secret, _IDENTIFIER_LABEL, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass
class HostLog:
    """The log's signer, identifier key, published checkpoint file and an in-memory copy of the database's tree."""

    signer: NoteSigner
    identifier_key: bytes = field(repr=False)
    folder: Path
    #: the database's leaf hashes read so far (entries are never changed: only new ones are read)
    tree: MemoryTree = field(default_factory=MemoryTree, repr=False)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @property
    def origin(self) -> str:
        """The log's origin line (and its key's name)."""
        return self.signer.name

    @property
    def verifier(self) -> NoteVerifier:
        """The log's public verifier key."""
        return self.signer.verifier

    @property
    def checkpoint_path(self) -> Path:
        """The published checkpoint file."""
        return self.folder / CHECKPOINT_FILE

    def published(self) -> tuple[bytes, Checkpoint] | None:
        """The published checkpoint (note and parsed), or None before the first; a file not signed by the log key is refused."""
        try:
            with open(self.checkpoint_path, "rb") as handle:
                note = handle.read(MAX_NOTE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise LogStateError(f"{self.checkpoint_path}: cannot read the published checkpoint: {error.strerror or error}") from None
        try:
            return note, open_checkpoint(note, [self.verifier], origin=self.origin)
        except LogVerificationError as error:
            raise LogStateError(f"{self.checkpoint_path}: not a checkpoint of this log signed by its key: {error}") from None

    def check_tree(self, published: Checkpoint | None) -> None:
        """Refuse a database tree (:attr:`tree`) shorter than the published checkpoint or inconsistent with it."""
        if published is None:
            return
        if self.tree.size < published.size:
            raise LogStateError(
                f"the database's log has {self.tree.size} entries but the published checkpoint ({self.checkpoint_path}) has {published.size}: "
                "the database is older than the log already published (restored from an older copy?); a rewind needs "
                "`grader admin log-rewind` (docs/hosting.md), never a silent restore"
            )
        if self.tree.root(published.size) != published.root_hash:
            raise LogStateError(
                f"the database's log is inconsistent with the published checkpoint ({self.checkpoint_path}): its first {published.size} "
                f"entries hash to {_b64(self.tree.root(published.size))}, the checkpoint says {_b64(published.root_hash)} (history rewritten?)"
            )

    @contextmanager
    def _file_lock(self) -> Iterator[None]:
        # Private like the rest of the state folder, whichever process (server, `grader admin`) creates them.
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(self.folder / (CHECKPOINT_FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "r+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def rewind(self, published: Checkpoint, statement: bytes, stamp: str) -> tuple[bytes, Checkpoint]:
        """After a disaster: keep the replaced checkpoint file and the signed ``statement`` in ``log/rewinds/``, then
        publish :attr:`tree` (which does not extend ``published``) in its place. Refused unless ``published`` is at
        least as new as the file (the newest published checkpoint must be the one rewound)."""
        with self.lock, self._file_lock():
            current = self.published()
            if current is not None and current[1].size > published.size:
                raise LogStateError(f"{self.checkpoint_path} holds a checkpoint of {current[1].size} entries: rewind from the newest one published")
            folder = self.folder / "rewinds"
            folder.mkdir(mode=0o700, exist_ok=True)
            if current is not None:
                atomic_write_bytes(folder / f"{stamp}.replaced.checkpoint", current[0], mode=0o600)
            atomic_write_bytes(folder / f"{stamp}.statement", statement, mode=0o600)
            checkpoint = Checkpoint(self.origin, self.tree.size, self.tree.root())
            note = sign_checkpoint(checkpoint, self.signer)
            atomic_write_bytes(self.checkpoint_path, note, mode=0o600)
            return note, checkpoint

    def publish(self) -> tuple[bytes, Checkpoint]:
        """Sign a checkpoint of :attr:`tree` and write it unless the file already holds one as large (compare-and-swap)."""
        with self.lock, self._file_lock():
            current = self.published()
            self.check_tree(None if current is None else current[1])
            if current is not None and current[1].size >= self.tree.size:
                return current
            checkpoint = Checkpoint(self.origin, self.tree.size, self.tree.root())
            note = sign_checkpoint(checkpoint, self.signer)
            atomic_write_bytes(self.checkpoint_path, note, mode=0o600)
            return note, checkpoint
