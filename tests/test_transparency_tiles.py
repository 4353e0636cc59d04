"""C2SP tlog-tiles: path encoding, tile widths (the specification's 70,000-entry example), contents, bundles."""

from __future__ import annotations

import itertools

import pytest

from grader.errors import UsageError
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import HASH_SIZE, MemoryTree, consistency_proof, inclusion_proof, leaf_hash, tree_hash
from grader.transparency.tiles import (
    ENTRIES,
    Tile,
    TileNodes,
    bundles_for_size,
    check_bundle,
    entry_bundle,
    index_path,
    iter_bundles,
    iter_tiles,
    parse_tile_path,
    split_entry_bundle,
    split_tile,
    tile_bytes,
    tiles_for_size,
)


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "000"), (5, "005"), (67, "067"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067"), (273, "273"), (10**9, "x001/x000/x000/000")],
)
def test_index_paths(index: int, path: str) -> None:
    assert index_path(index) == path
    assert parse_tile_path(f"tile/0/{path}") == Tile(0, index)


def test_tile_paths_full_partial_and_entries() -> None:
    assert Tile(0, 1234067).path == "tile/0/x001/x234/067"
    assert Tile(1, 17, 3).path == "tile/1/017.p/3"
    assert Tile(ENTRIES, 273, 112).path == "tile/entries/273.p/112"
    for tile in (Tile(0, 1234067), Tile(1, 17, 3), Tile(ENTRIES, 273, 112), Tile(63, 0, 255)):
        assert parse_tile_path(tile.path) == tile


@pytest.mark.parametrize(
    "path",
    [
        "tile/0/1",  # not three digits
        "tile/0/x000/001",  # a leading zero group: two spellings of one index
        "tile/0/001.p/256",  # a partial tile is narrower than 256
        "tile/0/001.p/0",
        "tile/0/001.p/07",
        "tile/64/000",  # beyond level 63
        "tile/01/000",  # leading zero in the level
        "tile/entries/x001",
        "tile/0/../000",
        "tile/0/000/",
        "/tile/0/000",
    ],
)
def test_other_paths_are_not_tiles(path: str) -> None:
    with pytest.raises(LogVerificationError):
        parse_tile_path(path)


def test_tiles_of_70000_entries_as_the_specification_describes() -> None:
    # "a tree of size 70,000 will be represented by 273 full level 0 tiles, one partial level 0 tile of width 112,
    # one full level 1 tile, one partial level 1 tile of width 17, and one partial level 2 tile of width 1."
    tiles = tiles_for_size(70_000)
    by_level = {level: [tile for tile in tiles if tile.level == level] for level in (0, 1, 2)}
    assert len(tiles) == 273 + 1 + 1 + 1 + 1
    assert [tile for tile in by_level[0] if not tile.partial] == [Tile(0, index) for index in range(273)]
    assert [tile for tile in by_level[0] if tile.partial] == [Tile(0, 273, 112)]
    assert by_level[1] == [Tile(1, 0), Tile(1, 1, 17)]
    assert by_level[2] == [Tile(2, 0, 1)]
    assert [tile.path for tile in tiles[-4:]] == ["tile/0/273.p/112", "tile/1/000", "tile/1/001.p/17", "tile/2/000.p/1"]
    bundles = bundles_for_size(70_000)
    assert len(bundles) == 274 and bundles[-1] == Tile(ENTRIES, 273, 112)


def test_tiles_of_small_sizes() -> None:
    assert tiles_for_size(0) == []
    assert tiles_for_size(1) == [Tile(0, 0, 1)]
    assert tiles_for_size(255) == [Tile(0, 0, 255)]
    # "a tree of size 256 will be represented by a full level 0 tile and a partial level 1 tile of width 1"
    assert tiles_for_size(256) == [Tile(0, 0), Tile(1, 0, 1)]
    assert tiles_for_size(257) == [Tile(0, 0), Tile(0, 1, 1), Tile(1, 0, 1)]
    assert tiles_for_size(65_536) == [*(Tile(0, index) for index in range(256)), Tile(1, 0), Tile(2, 0, 1)]


ENTRY_LIST = [f"entry {number}".encode() * (number % 5) for number in range(700)]
TREE = MemoryTree.from_entries(ENTRY_LIST)


def test_tile_contents_are_the_level_hashes() -> None:
    tiles = {tile: tile_bytes(TREE, tile) for tile in tiles_for_size(700)}
    assert set(tiles) == {Tile(0, 0), Tile(0, 1), Tile(0, 2, 188), Tile(1, 0, 2)}
    assert tiles[Tile(0, 2, 188)] == b"".join(leaf_hash(entry) for entry in ENTRY_LIST[512:700])
    assert len(tiles[Tile(0, 0)]) == 8192
    # A level-1 hash is the root of the full level-0 tile below it.
    assert split_tile(tiles[Tile(1, 0, 2)], Tile(1, 0, 2)) == [
        MemoryTree.from_entries(ENTRY_LIST[:256]).root(),
        MemoryTree.from_entries(ENTRY_LIST[256:512]).root(),
    ]
    with pytest.raises(LogVerificationError):
        split_tile(tiles[Tile(0, 0)][:-1], Tile(0, 0))


def test_proofs_from_tiles_equal_proofs_from_the_tree() -> None:
    for size in (1, 255, 256, 257, 511, 512, 600, 700):
        tiles = {tile: tile_bytes(TREE, tile) for tile in tiles_for_size(size)}
        nodes = TileNodes(size, tiles.__getitem__)
        assert tree_hash(nodes, size) == TREE.root(size)
        for index in {0, size // 3, size - 1}:
            assert inclusion_proof(nodes, index, size) == inclusion_proof(TREE, index, size)
        for size1 in {1, size // 2 or 1, size - 1 or 1}:
            assert consistency_proof(nodes, size1, size) == consistency_proof(TREE, size1, size)
        assert set(nodes.tiles()) <= set(tiles)


def test_entry_bundles_round_trip_and_match_level_zero() -> None:
    tile = Tile(ENTRIES, 2, 188)
    bundle = entry_bundle(ENTRY_LIST[512:700])
    assert bundle[:2] == len(ENTRY_LIST[512]).to_bytes(2, "big")
    entries = split_entry_bundle(bundle, tile)
    assert entries == ENTRY_LIST[512:700]
    level0 = split_tile(tile_bytes(TREE, Tile(0, 2, 188)), Tile(0, 2, 188))
    check_bundle(entries, level0, tile)
    with pytest.raises(LogVerificationError):
        check_bundle([b"forged", *entries[1:]], level0, tile)
    for broken in (bundle[:-1], bundle + b"\x00", bundle + b"\x00\x00"):
        with pytest.raises(LogVerificationError):
            split_entry_bundle(broken, tile)
    with pytest.raises(UsageError):
        entry_bundle([b"x" * 65_536])
    assert entry_bundle([b""]) == b"\x00\x00"
    assert HASH_SIZE * 256 == 8192


def test_tile_lists_are_lazy_for_a_claimed_size() -> None:
    # A checkpoint may claim 2**32 entries: its 16 million tiles are produced one at a time, never listed.
    first = list(itertools.islice(iter_tiles(2**32), 3))
    assert first == [Tile(0, 0), Tile(0, 1), Tile(0, 2)]
    assert next(iter_bundles(2**32)) == Tile(ENTRIES, 0)
    for size in (0, 1, 255, 256, 257, 65_536, 70_000):
        assert list(iter_bundles(size)) == [Tile(ENTRIES, tile.index, tile.width) for tile in iter_tiles(size) if tile.level == 0]
