"""After the reveal, `grader log audit URL --board` recomputes every final row from its logged, host-signed full
report (grader/cli/log_final.py): the reveal's board digests cover the boards as they stood at the
reveal, so a row served differently from its report before the reveal is caught only by recomputing it. (A row's
numbers edited in the database change nothing served: the server derives them from the signed report.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from grader.cli.log_final import FinalBoardsDiffer, board_mismatches, check_final_scores
from grader.hosting.api.app import create_app
from grader.transparency.boards import check_boards_against_log
from grader.transparency.errors import LogVerificationError
from tests.hosting.browser import http_server
from tests.hosting.hostile_host import hostile_host
from tests.hosting.leaderboard_world import make_world, seed_demo
from tests.hosting.support import admin, grader_cli
from tests.hosting.transparency_support import reader, restarted, served_entries
from tests.hosting.world import World


def _ended(world: World, client: TestClient) -> None:
    """Every participant but one names its first submission a final; the competition ends."""
    chosen = world.submissions[0]
    answer = client.put("/api/v1/finals", json={"submissions": [chosen.id]}, headers={"Authorization": f"Bearer {world.tokens[chosen.participant]}"})
    assert answer.status_code == 200, answer.text
    admin(world.state.root, "end", "--yes", database=world.database)


def _reveal(world: World) -> None:
    admin(world.state.root, "log-reveal", "--competition", str(world.ctx.competition.path), database=world.database)
    restarted()


def _served_with_task_means_moved(read: Callable[[str], bytes], submission: str) -> Callable[[str], bytes]:
    """``read`` of a hostile host: ``submission``'s row of every board it serves shows its task means moved by 0.1."""

    def hostile(path: str) -> bytes:
        return _moved(path, read(path), submission)

    return hostile


def _moved(path: str, body: bytes, submission: str) -> bytes:
    """``body`` as a hostile host serves ``path``: the task means of ``submission``'s board rows moved by 0.1."""
    if not path.lstrip("/").startswith("api/v1/leaderboard?") and path.lstrip("/").split("?")[0] != "api/v1/leaderboard":
        return body
    boards = json.loads(body)
    for board in boards["boards"]:
        for row in board["entries"]:
            if row["submission"] == submission:
                row["tasks"] = {task: round(mean + 0.1, 4) for task, mean in row["tasks"].items()}
    return json.dumps(boards).encode()


def _alter_task_means(world: World, submission: str) -> None:
    """In the database: one result's stored per-task part scores (the board's task columns) moved by 0.1."""
    with world.ctx.db.engine.begin() as connection:
        row = connection.execute(
            text("SELECT p.result_id, p.tasks FROM result_parts p JOIN submissions s ON s.result_id = p.result_id WHERE s.id = :id"),
            {"id": submission},
        ).one()
        tasks = row.tasks if isinstance(row.tasks, dict) else json.loads(row.tasks)
        altered = {part: {task: value + 0.1 for task, value in means.items()} for part, means in tasks.items()}
        connection.execute(text("UPDATE result_parts SET tasks = :tasks WHERE result_id = :id"), {"tasks": json.dumps(altered), "id": row.result_id})
    restarted()  # as a restarted server


def test_a_row_edited_in_the_database_shows_nowhere_and_one_served_otherwise_is_caught_by_recomputing_it(tmp_path: Path) -> None:
    world = make_world(tmp_path, None)
    try:
        seed_demo(world)
        client = TestClient(create_app(world.ctx))
        _ended(world, client)
        target = client.get("/api/v1/leaderboard", params={"part": "private"}).json()["boards"][0]["entries"][0]["submission"]
        before = client.get("/api/v1/leaderboard", params={"part": "private"}).json()
        _alter_task_means(world, target)
        assert client.get("/api/v1/leaderboard", params={"part": "private"}).json() == before  # the edit shows nowhere
        _reveal(world)
        entries = served_entries(client, world)
        assert check_boards_against_log(entries, reader(client)).startswith("board: the final public and private boards")
        assert check_final_scores(entries, reader(client)) is not None
        # a host serving a row's numbers other than its report's: the recomputation names the row
        with pytest.raises(FinalBoardsDiffer) as caught:
            check_final_scores(entries, _served_with_task_means_moved(reader(client), target))
        assert {row.submission for row in caught.value.rows} == {target}
        assert all(row.what.startswith("task means") for row in caught.value.rows)
        # a row whose result the database points at another submission's logged, signed report: caught as such
        with world.ctx.db.engine.begin() as connection:
            other = connection.execute(text("SELECT result_id FROM submissions WHERE id != :id AND result_id IS NOT NULL"), {"id": target}).first()
            connection.execute(text("UPDATE submissions SET result_id = :other WHERE id = :id"), {"other": other.result_id, "id": target})
        restarted()
        with pytest.raises(LogVerificationError, match="logged for another submission or participant"):
            check_final_scores(entries, reader(client))
    finally:
        world.ctx.db.dispose()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str, Path]]:
    root = tmp_path_factory.mktemp("final-audit-user")
    world = make_world(tmp_path_factory.mktemp("final-audit"), None)
    seed_demo(world)
    _ended(world, TestClient(create_app(world.ctx)))
    _reveal(world)
    with http_server(world.ctx) as url:
        yield world, url, root
    world.ctx.db.dispose()


@pytest.mark.slow
def test_log_audit_board_recomputes_the_final_boards_and_names_a_row_served_otherwise(site: tuple[World, str, Path]) -> None:
    world, url, root = site
    vkey = TestClient(create_app(world.ctx)).get("/log/key").text.strip()
    env = {"XDG_STATE_HOME": str(root / "user-state")}
    honest = grader_cli("log", "audit", f"{url}/log", "--log-key", vkey, "--board", "--host", env=env, timeout=120)
    assert honest.returncode == 0, honest.stdout + honest.stderr
    assert "board: the final public and private boards are the ones the reveal logged" in honest.stdout
    assert "final row(s) recomputed from their logged, signed full reports: scores and order as served" in honest.stdout
    target = TestClient(create_app(world.ctx)).get("/api/v1/leaderboard", params={"part": "public"}).json()["boards"][0]["entries"][-1]["submission"]
    with hostile_host(url, lambda path, body: _moved(path, body, target)) as hostile:  # a host serving numbers not its reports'
        altered = grader_cli("log", "audit", f"{hostile}/log", "--log-key", vkey, "--board", env=env, timeout=120)
    assert altered.returncode == 1, altered.stdout + altered.stderr
    assert "the log's signed checkpoint the audit checked:" in altered.stderr
    assert "differs: public board" in altered.stderr and target in altered.stderr
    assert "final board row(s) differ from what their signed reports give" in altered.stderr


def test_rows_out_of_the_order_of_their_recomputed_scores_are_named() -> None:
    recomputed = {"a": (0.5, {"t": 0.5}), "b": (0.7, {"t": 0.7}), "base": (0.9, {"t": 0.9})}
    rows = [
        {"submission": "base", "rank": None, "score": 0.9, "tasks": {"t": 0.9}, "report": "/r/base"},  # baselines apart
        {"submission": "a", "rank": 1, "score": 0.5, "tasks": {"t": 0.5}, "report": "/r/a"},
        {"submission": "b", "rank": 2, "score": 0.7, "tasks": {"t": 0.7}, "report": "/r/b"},
    ]
    found = board_mismatches("public", {"setting": "zero-shot", "entries": rows}, lambda row, where: recomputed[row["submission"]])
    assert [(row.submission, row.what) for row in found] == [("b", "placed below a lower score")]
    assert (
        board_mismatches("public", {"setting": "zero-shot", "entries": [rows[0], rows[2], rows[1]]}, lambda row, where: recomputed[row["submission"]])
        == []
    )
