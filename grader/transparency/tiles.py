"""C2SP ``tlog-tiles``: the log as static, cacheable files of hashes and entries.

A tile at level ``L`` and index ``N`` holds up to 256 consecutive hashes of tree level ``8 * L``:
hash ``i`` is ``MTH(D[(N*256 + i) * 256**L : (N*256 + i + 1) * 256**L])``. Full tiles have 256
(8,192 bytes); the rightmost tile of a level is *partial* (``.p/<W>``, ``W`` from 1 to 255) and
is never hashed into the level above. Entry bundles under ``tile/entries/`` hold the entries of
the matching level-0 tile, each as a big-endian uint16 length and the entry's bytes.

Paths encode ``N`` in 3-digit groups, all but the last prefixed with ``x``: index 1234067 is
``x001/x234/067``, so that tiles can be plain files in folders and served as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from grader.errors import UsageError
from grader.text import quote_id
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import HASH_SIZE, MemoryTree, NodeSource, leaf_hash, subtree_hash

#: Hashes in a full tile, and the tree levels one tile spans.
TILE_WIDTH = 256
TILE_HEIGHT = 8
#: Largest tile level (the specification's bound).
MAX_LEVEL = 63
#: Largest entry an entry bundle can hold (uint16 length).
MAX_ENTRY_BYTES = 0xFFFF
ENTRIES = "entries"

_PATH = re.compile(r"tile/(entries|0|[1-9][0-9]?)/((?:x[0-9]{3}/)*[0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?")


@dataclass(frozen=True)
class Tile:
    """One tile (``level`` a number) or entry bundle (``level`` is ``"entries"``): index and width."""

    level: int | str
    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        if self.level != ENTRIES and not (isinstance(self.level, int) and 0 <= self.level <= MAX_LEVEL):
            raise UsageError(f"tile level {self.level!r} is neither 0..{MAX_LEVEL} nor {ENTRIES!r}")
        if self.index < 0 or not 1 <= self.width <= TILE_WIDTH:
            raise UsageError(f"tile index {self.index} or width {self.width} out of range")

    @property
    def partial(self) -> bool:
        """Whether this is a partial tile (fewer than 256 hashes or entries)."""
        return self.width < TILE_WIDTH

    @property
    def path(self) -> str:
        """The tile's path under the log's prefix, e.g. ``tile/1/x001/234.p/17``."""
        suffix = f".p/{self.width}" if self.partial else ""
        return f"tile/{self.level}/{index_path(self.index)}{suffix}"


def index_path(index: int) -> str:
    """A tile index as path elements: 3-digit groups, all but the last prefixed with ``x``."""
    if index < 0:
        raise UsageError(f"negative tile index {index}")
    digits = str(index)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[start : start + 3] for start in range(0, len(digits), 3)]
    return "/".join([*(f"x{group}" for group in groups[:-1]), groups[-1]])


def parse_tile_path(path: str) -> Tile:
    """The tile a request path names (``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/...``), in its one canonical
    spelling; :class:`LogVerificationError` for anything else."""
    match = _PATH.fullmatch(path)
    if match is None or len(path) > 200:
        raise LogVerificationError(f"{quote_id(path)} is not a tile path")
    level_text, index_text, width_text = match.groups()
    groups = index_text.split("/")
    # One spelling per index: no leading all-zero group ("x000/001" is "001").
    if len(groups) > 1 and groups[0] == "x000":
        raise LogVerificationError(f"{quote_id(path)} is not a tile path")
    width = TILE_WIDTH if width_text is None else int(width_text)
    if width > TILE_WIDTH - 1 and width_text is not None:
        raise LogVerificationError(f"{quote_id(path)} is not a tile path")
    level: int | str = ENTRIES if level_text == ENTRIES else int(level_text)
    if level != ENTRIES and int(level) > MAX_LEVEL:
        raise LogVerificationError(f"{quote_id(path)} is not a tile path")
    index = int("".join(group.lstrip("x") for group in groups))
    return Tile(level, index, width)


def level_widths(size: int, level: int) -> tuple[int, int]:
    """For a tree of ``size`` leaves: the number of full tiles at ``level`` and the width of its partial tile (0: none)."""
    hashes = size >> (TILE_HEIGHT * level)
    return hashes // TILE_WIDTH, hashes % TILE_WIDTH


def iter_tiles(size: int) -> Iterator[Tile]:
    """Every hash tile a tree of ``size`` leaves is served as, one at a time: full tiles, then each level's partial one.

    Lazy, so that a checkpoint claiming 2**32 entries costs nothing until its tiles are read
    (a list of its 16 million level-0 tiles took gigabytes before a byte was fetched)."""
    if size < 0:
        raise UsageError(f"negative tree size {size}")
    level = 0
    while size >> (TILE_HEIGHT * level):
        full, partial = level_widths(size, level)
        for index in range(full):
            yield Tile(level, index)
        if partial:
            yield Tile(level, full, partial)
        level += 1


def iter_bundles(size: int) -> Iterator[Tile]:
    """Every entry bundle of a tree of ``size`` leaves, one at a time (the same indexes and widths as level 0)."""
    if size < 0:
        raise UsageError(f"negative tree size {size}")
    full, partial = level_widths(size, 0)
    for index in range(full):
        yield Tile(ENTRIES, index)
    if partial:
        yield Tile(ENTRIES, full, partial)


def tiles_for_size(size: int) -> list[Tile]:
    """:func:`iter_tiles` as a list, for a tree that is here (a writer's); a reader of a claimed size iterates."""
    return list(iter_tiles(size))


def bundles_for_size(size: int) -> list[Tile]:
    """:func:`iter_bundles` as a list, for a tree that is here (a writer's); a reader of a claimed size iterates."""
    return list(iter_bundles(size))


def tile_for(level: int, index: int, size: int) -> Tile:
    """The tile of a tree of ``size`` leaves that holds node ``index`` of tree level ``8 * level``."""
    full, partial = level_widths(size, level)
    number = index // TILE_WIDTH
    if number < full:
        return Tile(level, number)
    if number == full and index % TILE_WIDTH < partial:
        return Tile(level, number, partial)
    raise UsageError(f"node {index} of tile level {level} is not in a tree of {size} leaves")


def tile_bytes(source: NodeSource, tile: Tile) -> bytes:
    """The contents of a hash tile: its ``width`` hashes of tree level ``8 * level``, concatenated."""
    if tile.level == ENTRIES:
        raise UsageError("an entry bundle is built from entries, not hashes")
    level = TILE_HEIGHT * int(tile.level)
    first = tile.index * TILE_WIDTH
    return b"".join(source.node(level, first + offset) for offset in range(tile.width))


def split_tile(data: bytes, tile: Tile) -> list[bytes]:
    """The hashes in a tile's bytes, checking that it holds exactly ``width`` of them."""
    if len(data) != tile.width * HASH_SIZE:
        raise LogVerificationError(f"{tile.path} has {len(data)} bytes, not {tile.width * HASH_SIZE}")
    return [data[start : start + HASH_SIZE] for start in range(0, len(data), HASH_SIZE)]


def entry_bundle(entries: Sequence[bytes]) -> bytes:
    """An entry bundle: each entry as a big-endian uint16 length and its bytes."""
    if not 1 <= len(entries) <= TILE_WIDTH:
        raise UsageError(f"an entry bundle holds 1 to {TILE_WIDTH} entries, not {len(entries)}")
    parts = []
    for entry in entries:
        if len(entry) > MAX_ENTRY_BYTES:
            raise UsageError(f"a log entry has at most {MAX_ENTRY_BYTES} bytes, not {len(entry)}")
        parts.append(len(entry).to_bytes(2, "big") + entry)
    return b"".join(parts)


def split_entry_bundle(data: bytes, tile: Tile) -> list[bytes]:
    """The entries of a bundle's bytes, checking that it holds exactly ``width`` of them and nothing more."""
    entries: list[bytes] = []
    position = 0
    while position < len(data):
        if len(entries) == tile.width or position + 2 > len(data):
            raise LogVerificationError(f"{tile.path} has bytes after its {tile.width} entries")
        length = int.from_bytes(data[position : position + 2], "big")
        position += 2
        if position + length > len(data):
            raise LogVerificationError(f"{tile.path}: entry {tile.index * TILE_WIDTH + len(entries)} is cut short")
        entries.append(data[position : position + length])
        position += length
    if len(entries) != tile.width:
        raise LogVerificationError(f"{tile.path} holds {len(entries)} entries, not {tile.width}")
    return entries


def check_bundle(entries: Sequence[bytes], level0: Sequence[bytes], tile: Tile) -> None:
    """Raise :class:`LogVerificationError` unless each entry hashes to its leaf hash in the level-0 tile."""
    for offset, (entry, hashed) in enumerate(zip(entries, level0, strict=True)):
        if leaf_hash(entry) != hashed:
            raise LogVerificationError(f"entry {tile.index * TILE_WIDTH + offset} does not match its leaf hash in tile 0")


class TileNodes:
    """A :class:`NodeSource` over the tiles of a tree of ``size`` leaves, fetched through ``read_tile``
    (which returns a tile's bytes: from a mirror, a folder, an HTTP client). Levels between tile
    levels are rebuilt by hashing the tile's hashes."""

    def __init__(self, size: int, read_tile: Callable[[Tile], bytes]) -> None:
        self.size = size
        self._read = read_tile
        self._trees: dict[Tile, MemoryTree] = {}

    def _tree(self, tile: Tile) -> MemoryTree:
        tree = self._trees.get(tile)
        if tree is None:
            tree = MemoryTree(split_tile(self._read(tile), tile))
            self._trees[tile] = tree
        return tree

    def node(self, level: int, index: int) -> bytes:
        """The hash of the complete subtree at ``(level, index)``, from the tile that covers it."""
        tile_level, height = divmod(level, TILE_HEIGHT)
        first = index << height  # the node's first hash at tree level 8 * tile_level
        tile = tile_for(tile_level, first, self.size)
        offset = first - tile.index * TILE_WIDTH
        return subtree_hash(self._tree(tile), offset, offset + (1 << height))

    def tiles(self) -> Iterator[Tile]:
        """The tiles read so far."""
        return iter(self._trees)
