"""A log as a folder of C2SP tlog-tiles files: written for serving or mirroring, read back and checked.

The folder holds ``checkpoint``, ``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]`` exactly as a
log serves them, so a mirror made with a plain HTTP client (or ``wget -r``) is such a folder.
:func:`read_log_folder` trusts none of it: the checkpoint must be signed by a trusted key, every
entry bundle must match its level-0 tile, every tile must be the one the entries give, and the
entries must hash to the checkpoint's root. :func:`read_log` reads the same files through any reader (a folder, an
HTTP client) and checks each as it arrives.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.files import atomic_write_bytes, read_bounded
from grader.transparency.checkpoint import Checkpoint, check_extends, open_checkpoint
from grader.transparency.entries import decode_entry
from grader.transparency.errors import InconsistentCheckpoints, LogTooLarge, LogVerificationError
from grader.transparency.merkle import HASH_SIZE, MemoryTree, consistency_proof, leaf_hash
from grader.transparency.note import MAX_NOTE_BYTES, NoteVerifier
from grader.transparency.tiles import (
    MAX_ENTRY_BYTES,
    TILE_WIDTH,
    Tile,
    bundles_for_size,
    entry_bundle,
    iter_bundles,
    iter_tiles,
    split_entry_bundle,
    split_tile,
    tile_bytes,
    tiles_for_size,
)

CHECKPOINT_NAME = "checkpoint"
#: Most entries an audit reads by default (``grader log audit --max-entries``): far above any competition's history.
MAX_AUDIT_ENTRIES = 1_000_000
#: Most bytes of entries an audit holds by default (``--max-bytes``); a competition's entries are a few hundred bytes each.
MAX_AUDIT_BYTES = 256 << 20
_MAX_BUNDLE_BYTES = TILE_WIDTH * (2 + MAX_ENTRY_BYTES)
_TILE_BYTES = TILE_WIDTH * HASH_SIZE

#: Reads one file of a log: its path under the log's prefix and the most bytes it may have (a folder, an HTTP client).
LogReader = Callable[[str, int], bytes]


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


def folder_reader(root: Path) -> LogReader:
    """A :data:`LogReader` of a log folder; a link is refused (a mirror is untrusted: a link could point the audit at any file)."""

    def read(name: str, limit: int) -> bytes:
        path = root / name
        return read_bounded(path, limit, lambda reason: LogVerificationError(f"{path}: {reason}"), what="log file", follow_links=False)

    return read


def read_log_folder(
    folder: str | os.PathLike[str],
    verifiers: Iterable[NoteVerifier],
    *,
    origin: str | None = None,
    max_entries: int = MAX_AUDIT_ENTRIES,
    max_bytes: int = MAX_AUDIT_BYTES,
) -> LogContents:
    """The entries of the log in ``folder``, after every check of :func:`read_log`."""
    root = Path(folder)
    if not root.is_dir():
        raise LogVerificationError(f"{root}: not a folder")
    return read_log(folder_reader(root), verifiers, where=str(root), origin=origin, max_entries=max_entries, max_bytes=max_bytes)


def read_log(
    read: LogReader,
    verifiers: Iterable[NoteVerifier],
    *,
    where: str,
    origin: str | None = None,
    max_entries: int = MAX_AUDIT_ENTRIES,
    max_bytes: int = MAX_AUDIT_BYTES,
) -> LogContents:
    """The entries of the log ``read`` reads (``where`` names it in errors), after every check of the module's docstring;
    :class:`LogVerificationError` naming the first file that fails.

    Checked as it is read, so a hostile log costs little: the checkpoint's size against ``max_entries``
    before any tile (:class:`LogTooLarge`); then each entry bundle against its level-0 tile, and each
    entry's shape, as the bundle arrives; the entries held against ``max_bytes``. The tile lists are lazy.
    """
    note = read(CHECKPOINT_NAME, MAX_NOTE_BYTES)
    checkpoint = open_checkpoint(note, verifiers, origin=origin)
    if checkpoint.size > max_entries:
        raise LogTooLarge(
            f"{where}: its checkpoint claims {checkpoint.size} entries, more than the {max_entries} this audit reads",
            hint="`grader log audit --max-entries N` reads a larger log",
        )
    entries: list[bytes] = []
    held = 0
    for bundle in iter_bundles(checkpoint.size):
        level0 = Tile(0, bundle.index, bundle.width)
        hashes = split_tile(read(level0.path, _TILE_BYTES), level0)
        found = split_entry_bundle(read(bundle.path, _MAX_BUNDLE_BYTES), bundle)
        if [leaf_hash(entry) for entry in found] != hashes:
            raise LogVerificationError(f"{where}/{bundle.path}: the entries do not match {level0.path}")
        for offset, entry in enumerate(found):  # a hostile log of junk fails at its first bundle, not after downloading it all
            try:
                decode_entry(entry)
            except LogVerificationError as error:
                raise LogVerificationError(f"entry {len(entries) + offset}: {error}") from None
        held += sum(len(entry) for entry in found)
        if held > max_bytes:
            raise LogTooLarge(
                f"{where}: its entries pass {max_bytes} bytes by entry {len(entries) + len(found) - 1}, more than this audit holds",
                hint="`grader log audit --max-bytes N` reads a larger log",
            )
        entries.extend(found)
    tree = MemoryTree.from_entries(entries)
    if tree.root() != checkpoint.root_hash:
        raise LogVerificationError(f"{where}: the entries do not hash to the checkpoint's root (tree size {checkpoint.size})")
    for tile in iter_tiles(checkpoint.size):
        if tile.level != 0 and read(tile.path, _TILE_BYTES) != tile_bytes(tree, tile):
            raise LogVerificationError(f"{where}/{tile.path}: not the tile the entries give")
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
