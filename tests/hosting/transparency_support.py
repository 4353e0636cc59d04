"""What the log tests read from a test world's app as `grader log audit` reads it from a server."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from grader.hosting.leaderboard import built, values
from grader.hosting.leaderboard.board import _cache as board_cache
from grader.transparency.checkpoint import open_checkpoint
from grader.transparency.tiles import Tile, bundles_for_size, split_entry_bundle
from tests.hosting.world import World


def reader(client: TestClient) -> Callable[[str], bytes]:
    """A host path's body, as `grader log audit --board` fetches it (any answer but 200 fails)."""

    def read(path: str) -> bytes:
        answer = client.get("/" + path)
        assert answer.status_code == 200, (path, answer.status_code)
        return answer.content

    return read


def served_entries(client: TestClient, world: World) -> list[bytes]:
    """Every entry of the served log, read through its signed checkpoint and its entry bundles."""
    assert world.ctx.log is not None
    checkpoint = open_checkpoint(client.get("/log/checkpoint").content, [world.ctx.log.verifier])
    entries: list[bytes] = []
    for bundle in bundles_for_size(checkpoint.size):
        entries += split_entry_bundle(client.get(f"/log/{bundle.path}").content, Tile(bundle.level, bundle.index, bundle.width))
    assert len(entries) == checkpoint.size
    return entries


def restarted() -> None:
    """Forget what the server process computed (boards built, comparisons, reports read and scored): as a server
    restarted since (a test that edits the database or the reports behind the server's back)."""
    built._cache.clear()
    board_cache.clear()
    values._cache.clear()
    values._scored_cache.clear()
