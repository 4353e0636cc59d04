"""The checkpoints a user has seen of each log, kept per log key, and the leaf hashes that tell a stale copy from a fork.

``grader verify --log`` and ``grader log audit URL`` check every checkpoint they fetch against the ones this user saw
before. Those are kept under ``$XDG_STATE_HOME/grader/log-checkpoints/`` (``~/.local/state/...``), in one folder per
log *key* (``key-`` and the first 32 hex digits of the SHA-256 of its verifier key ``name+id+key``): two competitions
of one name on two servers are two logs with two keys, and neither's checkpoints are checked against the other's.

Each folder holds the checked checkpoints (``<size>-<root>.checkpoint``; the oldest beyond :data:`KEEP` are dropped)
and ``leaves``: the leaf hashes (32 bytes each) of the largest tree seen, when the client had them (an audit reads
every entry; ``verify --log`` reads the level-0 tiles of what it had not seen). Every saved checkpoint is a prefix of
that tree (each was checked against the others), so a copy that serves an *older* checkpoint is checked the other way
round: if the kept leaves hash to its root, it is a stale mirror, not a fork.

Before this layout the folder was named after the log's origin alone (the first 32 hex digits of the SHA-256 of the
origin). Such a folder is still read: a checkpoint in it that this key signed moves to the key's folder; one it did not
sign stays where it is (another log of that name), until that log's key is used.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.files import atomic_write_bytes
from grader.transparency.checkpoint import Checkpoint, open_checkpoint
from grader.transparency.errors import InconsistentCheckpoints, LogVerificationError
from grader.transparency.merkle import HASH_SIZE, MemoryTree
from grader.transparency.note import MAX_NOTE_BYTES, NoteVerifier

#: Most checkpoints kept per log (the oldest are dropped: each later one was checked against them).
KEEP = 64
#: Largest tree whose leaf hashes are kept (32 MiB): beyond it an older copy cannot be told from a rollback.
MAX_KEPT_LEAVES = 1 << 20
LEAVES_FILE = "leaves"


def state_root() -> Path:
    """``$XDG_STATE_HOME/grader/log-checkpoints`` (``~/.local/state/...`` without it)."""
    base = os.environ.get("XDG_STATE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "grader" / "log-checkpoints"


@dataclass(frozen=True)
class Stale:
    """A fetched checkpoint older than one seen before, and a prefix of it: a stale copy of the log."""

    size: int
    seen: int


@dataclass(frozen=True)
class SeenLog:
    """What this user has seen of the log signed by ``verifier``."""

    verifier: NoteVerifier

    @property
    def folder(self) -> Path:
        """This log key's folder."""
        return state_root() / ("key-" + hashlib.sha256(self.verifier.vkey.encode("utf-8")).hexdigest()[:32])

    @property
    def legacy_folder(self) -> Path:
        """The folder of the earlier layout, named after the origin alone."""
        return state_root() / hashlib.sha256(self.verifier.name.encode("utf-8")).hexdigest()[:32]

    def _migrate(self) -> None:
        """Move the earlier layout's checkpoints that this key signed into its folder; leave the others (another log)."""
        if not self.legacy_folder.is_dir():
            return
        for path in sorted(self.legacy_folder.glob("*.checkpoint")):
            note = _read(path)
            try:
                open_checkpoint(note, [self.verifier], origin=self.verifier.name)
            except LogVerificationError:
                continue  # another key's (a log of the same name elsewhere), or damaged: not this log's
            atomic_write_bytes(self.folder / path.name, note, mode=0o644)
            path.unlink(missing_ok=True)

    def notes(self) -> list[bytes]:
        """Every checkpoint of this log saved so far (unchecked bytes: the caller opens them)."""
        self._migrate()
        if not self.folder.is_dir():
            return []
        return [_read(path) for path in sorted(self.folder.glob("*.checkpoint"))]

    def save(self, note: bytes, checkpoint: Checkpoint) -> Path:
        """Keep ``note`` (already checked) among the checkpoints seen; the oldest beyond :data:`KEEP` are dropped."""
        path = self.folder / f"{checkpoint.size:020d}-{checkpoint.root_hash.hex()[:16]}.checkpoint"
        atomic_write_bytes(path, note, mode=0o644)
        for old in sorted(self.folder.glob("*.checkpoint"))[:-KEEP]:
            old.unlink(missing_ok=True)
        return path

    def leaves(self) -> list[bytes]:
        """The kept leaf hashes of the largest tree seen (none kept: empty)."""
        try:
            with open(self.folder / LEAVES_FILE, "rb") as handle:
                data = handle.read(MAX_KEPT_LEAVES * HASH_SIZE + 1)
        except FileNotFoundError:
            return []
        if len(data) % HASH_SIZE or len(data) > MAX_KEPT_LEAVES * HASH_SIZE:
            return []  # not a file this module wrote: as if none were kept
        return [data[start : start + HASH_SIZE] for start in range(0, len(data), HASH_SIZE)]

    def keep_leaves(self, leaves: Sequence[bytes], checkpoint: Checkpoint) -> None:
        """Keep ``leaves``, the leaf hashes of ``checkpoint``'s tree (checked here), if it is larger than the tree kept."""
        if len(leaves) != checkpoint.size or checkpoint.size > MAX_KEPT_LEAVES or checkpoint.size <= len(self.leaves()):
            return
        if MemoryTree(leaves).root() != checkpoint.root_hash:
            raise LogVerificationError(f"the log's leaf hashes do not hash to its checkpoint's root (tree size {checkpoint.size})")
        atomic_write_bytes(self.folder / LEAVES_FILE, b"".join(leaves), mode=0o644)

    def split_newer(self, earlier: Sequence[bytes], new_note: bytes, new: Checkpoint) -> tuple[list[bytes], Stale | None]:
        """The checkpoints of ``earlier`` (signed notes of this log) that ``new`` must extend, and, when some are larger
        than ``new``, the largest as :class:`Stale` once the kept leaves show ``new`` is a prefix of each.

        A larger checkpoint that ``new`` is not a prefix of is a fork (:class:`InconsistentCheckpoints` with both
        notes); one the kept leaves do not cover cannot be told from a rollback, and is refused the same way."""
        extend: list[bytes] = []
        stale: Stale | None = None
        kept: MemoryTree | None = None
        for note in earlier:
            seen = open_checkpoint(note, [self.verifier], origin=new.origin)
            if seen.size <= new.size:
                extend.append(note)
                continue
            kept = kept if kept is not None else MemoryTree(self.leaves())
            if kept.size < seen.size or kept.root(seen.size) != seen.root_hash:
                raise InconsistentCheckpoints(
                    f"the log went back from {seen.size} entries (seen before) to {new.size}, and this user keeps no hashes of that tree "
                    "to check it is a stale copy (audit an up-to-date copy first)",
                    seen=note,
                    new=new_note,
                )
            if kept.root(new.size) != new.root_hash:
                raise InconsistentCheckpoints(
                    f"the log forked: its checkpoint of {new.size} entries is not a prefix of the one of {seen.size} seen before",
                    seen=note,
                    new=new_note,
                )
            stale = Stale(new.size, max(seen.size, stale.seen if stale else 0))
        return extend, stale


def _read(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(MAX_NOTE_BYTES + 1)


def stale_line(stale: Stale) -> str:
    """What is printed of a stale copy."""
    return f"stale mirror: its checkpoint ({stale.size} entries) is older than one seen before ({stale.seen} entries), and a prefix of it"
