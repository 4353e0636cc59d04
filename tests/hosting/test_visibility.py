"""The visibility rules (grader.hosting.visibility): the rule itself, and every place that shows it agrees with it.

The report-download rule used to be written twice: the submission view said a report was available in
Ladder mode while the download answered 404. Both now ask the one rule.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from grader.hosting import visibility
from grader.hosting.api.app import create_app
from grader.hosting.db.session import Database
from grader.hosting.schedule import ENDED_AT_KEY, has_ended
from grader.hosting.services.admin import end_now
from grader.hosting.states import State, Track
from grader.hosting.visibility import Download, Part, board_visible, logs_visible, report_download
from tests.hosting.leaderboard_world import make_world, seed, seed_demo


def expected_download(track: str, result_state: str | None, ended: bool, ladder: bool) -> Download:
    """The rule as docs/leaderboard.md states it, written out again case by case."""
    if result_state is None:
        return Download.NONE  # nothing signed to download
    if track == "sample":
        return Download.FULL  # a sample run is graded on public data
    if ended:
        return Download.FULL  # after the end, everything of one's own
    if ladder:
        return Download.NONE  # the public-part report's numbers would undo the Ladder
    return Download.PUBLIC_PART if result_state == "scored" else Download.NONE


@pytest.mark.parametrize(
    ("track", "result_state", "ended", "ladder"),
    list(itertools.product(("sample", "hidden"), (None, "scored", "failed"), (False, True), (False, True))),
)
def test_report_download_rule(track: str, result_state: str | None, ended: bool, ladder: bool) -> None:
    assert report_download(track=track, result_state=result_state, ended=ended, ladder=ladder) is expected_download(
        track, result_state, ended, ladder
    )


def test_board_and_log_rules() -> None:
    assert board_visible(Part.PUBLIC, ended=False) and board_visible(Part.PUBLIC, ended=True)
    assert not board_visible(Part.PRIVATE, ended=False) and board_visible(Part.PRIVATE, ended=True)
    assert board_visible("public", ended=False) and not board_visible("private", ended=False)  # as a query string names them
    assert not board_visible("other", ended=True)
    assert logs_visible(Track.SAMPLE) and not logs_visible(Track.HIDDEN)
    assert report_download(track=Track.HIDDEN, result_state=State.SCORED, ended=False, ladder=False) is Download.PUBLIC_PART


def test_the_rules_are_pure_they_import_no_database_and_read_no_clock() -> None:
    """Whether the competition has ended is the caller's one read (grader.hosting.schedule), never the rules'.

    The hosting layers contract keeps the module below the database; this names what it may import at all.
    """
    tree = ast.parse(Path(visibility.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"__future__", "enum", "grader.hosting.states"}


@contextmanager
def end_reads(db: Database) -> Iterator[list[str]]:
    """The statements that read the host's early end (the ``ended_at`` setting) while the block runs."""
    seen: list[str] = []

    def observe(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if "settings" in statement and ENDED_AT_KEY in str(parameters):
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", observe)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", observe)


def test_each_request_reads_the_end_once(tmp_path: Path) -> None:
    """One read of the end per request: a request never sees the competition both open and ended."""
    world = make_world(tmp_path, None)
    try:
        seed_demo(world)
        client = TestClient(create_app(world.ctx))
        alice = {"Authorization": f"Bearer {world.tokens['alice']}"}
        first = world.submissions[0].id
        for ended in (False, True):
            for path, headers in (
                ("/api/v1/leaderboard", {}),
                ("/leaderboard.csv", {}),
                ("/api/v1/partition", {}),
                ("/api/v1/leaderboard/reports/" + world.by_name("alice-encoder-v2").id, {}),
                ("/api/v1/submissions", alice),
                (f"/api/v1/submissions/{first}", alice),
                ("/", {}),
                ("/api/v1/competition", {}),
            ):
                with end_reads(world.ctx.db) as reads:
                    assert client.get(path, headers=headers).status_code == 200, path
                assert len(reads) == 1, f"{path} read the end {len(reads)} times (ended: {ended})"
            end_now(world.ctx.db)
    finally:
        world.ctx.db.dispose()


@pytest.mark.parametrize("ladder", [False, True])
def test_view_board_and_download_agree_before_and_after_the_end(tmp_path: Path, ladder: bool) -> None:
    world = make_world(tmp_path, None, ladder_step=0.05 if ladder else None)
    try:
        grade = seed(world, "alice", "alice-1", 0.5)
        client = TestClient(create_app(world.ctx))
        alice = {"Authorization": f"Bearer {world.tokens['alice']}"}
        for ended in (False, True):
            assert has_ended(world.ctx.db, world.ctx.competition) is ended
            view = client.get(f"/api/v1/submissions/{grade.id}", headers=alice).json()
            download = client.get(f"/api/v1/submissions/{grade.id}/report", headers=alice)
            listed = client.get("/api/v1/submissions", headers=alice).json()
            available = not ladder or ended
            assert view["report_available"] is available and listed[0]["report_available"] is available
            assert download.status_code == (200 if available else 404), download.text
            # the board links a report exactly when its route serves one
            entry = client.get("/api/v1/leaderboard").json()["boards"][0]["entries"][0]
            served = client.get(f"/api/v1/leaderboard/reports/{grade.id}")
            assert (entry["report"] is not None) is (served.status_code == 200) is (not ladder or ended)
            # the private board: API, CSV and page alike, from the end on
            for path in ("/api/v1/leaderboard?part=private", "/leaderboard.csv?part=private", "/?part=private"):
                assert client.get(path).status_code == (200 if ended else 404), path
            if not ended:
                end_now(world.ctx.db)
    finally:
        world.ctx.db.dispose()
