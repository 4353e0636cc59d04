"""The visibility rules (grader.hosting.visibility): the rule itself, and every place that shows it agrees with it.

The report-download rule used to be written twice: the submission view said a report was available in
Ladder mode while the download answered 404. Both now ask the one rule.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from grader.hosting.api.app import create_app
from grader.hosting.services.admin import end_now
from grader.hosting.visibility import Download, board_visible, has_ended, logs_visible, report_download
from tests.hosting.leaderboard_world import make_world, seed


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
    assert board_visible("public", ended=False) and board_visible("public", ended=True)
    assert not board_visible("private", ended=False) and board_visible("private", ended=True)
    assert not board_visible("other", ended=True)
    assert logs_visible("sample") and not logs_visible("hidden")


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
