"""A log as a folder of C2SP tlog-tiles files: written for serving or mirroring, read back and checked.

The folder holds ``checkpoint``, ``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]`` exactly as a
log serves them, so a mirror made with a plain HTTP client (or ``wget -r``) is such a folder.
:func:`read_log_folder` trusts none of it: the checkpoint must be signed by a trusted key, every
entry bundle must match its level-0 tile, every tile must be the one the entries give, and the
entries must hash to the checkpoint's root.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.files import atomic_write_bytes, read_bounded
from grader.transparency.checkpoint import Checkpoint, check_extends, open_checkpoint
from grader.transparency.errors import InconsistentCheckpoints, LogVerificationError
from grader.transparency.merkle import MemoryTree, consistency_proof
from grader.transparency.note import MAX_NOTE_BYTES, NoteVerifier
from grader.transparency.tiles import (
    MAX_ENTRY_BYTES,
    TILE_WIDTH,
    Tile,
    bundles_for_size,
    entry_bundle,
    split_entry_bundle,
    split_tile,
    tile_bytes,
    tiles_for_size,
)

CHECKPOINT_NAME = "checkpoint"
#: Most entries an audit holds in memory: far above any competition's history.
MAX_AUDIT_SIZE = 1 << 24
_MAX_BUNDLE_BYTES = TILE_WIDTH * (2 + MAX_ENTRY_BYTES)


@dataclass(frozen=True)
class LogContents:
    """A checked log: its signed checkpoint (note bytes and parsed) and its entries."""

    note: bytes
    checkpoint: Checkpoint
    entries: tuple[bytes, ...]


def write_log_folder(folder: str | os.PathLike[str], entries: Sequence[bytes], note: bytes) -> None:
    """Write every tile and entry bundle of ``entries``, then the signed checkpoint ``note`` (of ``len(entries)``)."""
    root = Path(folder)
    tree = MemoryTree.from_entries(entries)
    for tile in tiles_for_size(tree.size):
        atomic_write_bytes(root / tile.path, tile_bytes(tree, tile))
    for bundle in bundles_for_size(tree.size):
        first = bundle.index * TILE_WIDTH
        atomic_write_bytes(root / bundle.path, entry_bundle(entries[first : first + bundle.width]))
    # The checkpoint last: a reader never sees a checkpoint whose tiles are not there yet.
    atomic_write_bytes(root / CHECKPOINT_NAME, note)


def _read(root: Path, name: str, limit: int) -> bytes:
    # A mirror is untrusted: a link could point the audit at any file on the machine.
    path = root / name
    return read_bounded(path, limit, lambda reason: LogVerificationError(f"{path}: {reason}"), what="log file", follow_links=False)


def read_log_folder(folder: str | os.PathLike[str], verifiers: Iterable[NoteVerifier], *, origin: str | None = None) -> LogContents:
    """The entries of the log in ``folder``, after every check of the module's docstring;
    :class:`LogVerificationError` naming the first file that fails."""
    root = Path(folder)
    if not root.is_dir():
        raise LogVerificationError(f"{root}: not a folder")
    note = _read(root, CHECKPOINT_NAME, MAX_NOTE_BYTES)
    checkpoint = open_checkpoint(note, verifiers, origin=origin)
    if checkpoint.size > MAX_AUDIT_SIZE:
        raise LogVerificationError(f"a log of {checkpoint.size} entries is larger than an audit reads ({MAX_AUDIT_SIZE})")
    entries: list[bytes] = []
    for bundle in bundles_for_size(checkpoint.size):
        level0 = Tile(0, bundle.index, bundle.width)
        hashes = split_tile(_read(root, level0.path, TILE_WIDTH * 32), level0)
        found = split_entry_bundle(_read(root, bundle.path, _MAX_BUNDLE_BYTES), bundle)
        tree = MemoryTree.from_entries(found)
        if tree.levels[0] != hashes:
            raise LogVerificationError(f"{root / bundle.path}: the entries do not match {level0.path}")
        entries.extend(found)
    tree = MemoryTree.from_entries(entries)
    if tree.root() != checkpoint.root_hash:
        raise LogVerificationError(f"{root}: the entries do not hash to the checkpoint's root (tree size {checkpoint.size})")
    for tile in tiles_for_size(checkpoint.size):
        if tile.level != 0 and _read(root, tile.path, TILE_WIDTH * 32) != tile_bytes(tree, tile):
            raise LogVerificationError(f"{root / tile.path}: not the tile the entries give")
    return LogContents(note, checkpoint, tuple(entries))


def check_seen(contents: LogContents, seen_note: bytes, verifiers: Iterable[NoteVerifier]) -> Checkpoint:
    """Check that the log in ``contents`` extends an earlier checkpoint of it (``seen_note``, signed by a trusted
    key); returns that checkpoint. A checkpoint of another log, or not validly signed, is a
    :class:`LogVerificationError`; one the log contradicts is an :class:`InconsistentCheckpoints` carrying both notes."""
    new = contents.checkpoint
    seen = open_checkpoint(seen_note, verifiers, origin=new.origin)
    proof: list[bytes] = []
    if 0 < seen.size < new.size:
        proof = consistency_proof(MemoryTree.from_entries(contents.entries), seen.size, new.size)
    try:
        check_extends(seen, new, proof)
    except LogVerificationError as error:
        raise InconsistentCheckpoints(f"the log contradicts a checkpoint seen before: {error}", seen=seen_note, new=contents.note) from None
    return seen
