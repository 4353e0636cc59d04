"""What is shown is what is logged: every number of a board row and of a participant's own view is computed from the
signed report, never read from the database's copy of it, and `grader log audit --board` checks each number a row
shows (score and task means) against its logged report, naming the rows it could not check and why.

The attack these replay: the stored score columns edited before the end (0.4414 shown as 0.5414) while the audit
passed. Served over a real socket; the hostile host is a real HTTP server in front of it that rewrites the board.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from grader.cli.log_fetch import check_served_board, log_fetcher, log_verifier, mirror
from grader.transparency.boards import LADDER_UNCHECKED
from grader.transparency.mirror import read_log_folder
from tests.hosting.browser import http_server
from tests.hosting.hostile_host import hostile_host
from tests.hosting.leaderboard_world import make_world, seed, seed_demo
from tests.hosting.support import grader_cli
from tests.hosting.transparency_support import restarted
from tests.hosting.world import World

pytestmark = pytest.mark.slow  # each test serves its competition on a socket


def shift_stored_scores(world: World, by: float) -> None:
    """The attack: every stored score column moved by ``by`` (part scores, task means, the submission's own score)."""
    with world.ctx.db.engine.begin() as connection:
        for row in connection.execute(text("SELECT result_id, tasks FROM result_parts")).all():
            tasks = row.tasks if isinstance(row.tasks, dict) else json.loads(row.tasks)
            moved = {part: {task: mean + by for task, mean in means.items()} for part, means in tasks.items()}
            connection.execute(
                text(
                    "UPDATE result_parts SET tasks = :tasks, public_score = public_score + :by, private_score = private_score + :by,"
                    " full_score = full_score + :by WHERE result_id = :id"
                ),
                {"tasks": json.dumps(moved), "by": by, "id": row.result_id},
            )
        connection.execute(text("UPDATE submissions SET public_score = public_score + :by WHERE public_score IS NOT NULL"), {"by": by})
    restarted()


def shown(url: str, token: str) -> dict[str, Any]:
    """Everything that shows a number: the board (JSON, CSV, page) and the participant's own views (list and each)."""
    auth = {"Authorization": f"Bearer {token}"}
    own = httpx.get(f"{url}/api/v1/submissions", headers=auth).json()
    return {
        "board": httpx.get(f"{url}/api/v1/leaderboard").json(),
        "csv": httpx.get(f"{url}/leaderboard.csv").text,
        "page": httpx.get(f"{url}/").text,
        "own": own,
        "each": [httpx.get(f"{url}/api/v1/submissions/{view['id']}", headers=auth).json() for view in own],
    }


def audit_board(url: str, scratch: Path) -> str:
    """`grader log audit URL/log --board`, in this process: the log mirrored and checked, then the board against it."""
    verifier = log_verifier(httpx.get(f"{url}/log/key").text.strip())
    mirror(f"{url}/log", scratch, verifier)
    return check_served_board(log_fetcher(), f"{url}/log", read_log_folder(scratch, [verifier], origin=verifier.name).entries)


def test_scores_edited_in_the_database_change_nothing_shown_and_a_board_showing_them_fails_the_audit(tmp_path: Path) -> None:
    world = make_world(tmp_path, None, resamples=200)
    try:
        seed_demo(world)
        with http_server(world.ctx) as url:
            before = shown(url, world.tokens["alice"])
            assert before["own"] and all(view["score"] is not None for view in before["own"] if view["state"] == "scored")
            shift_stored_scores(world, 0.1)
            assert shown(url, world.tokens["alice"]) == before  # what the signed reports say, whatever the database's columns say
            env = {"XDG_STATE_HOME": str(tmp_path / "user-state")}
            vkey = httpx.get(f"{url}/log/key").text.strip()
            honest = grader_cli("log", "audit", f"{url}/log", "--log-key", vkey, "--board", env=env, timeout=120)
            assert honest.returncode == 0, honest.stdout + honest.stderr
            rows = sum(len(board["entries"]) for board in before["board"]["boards"])
            assert f"board: {rows} row(s) show the score and task means of their logged report" in honest.stdout
            # A host that shows the stored columns anyway (as this server did): the row's task mean is not its report's.
            target = before["board"]["boards"][0]["entries"][0]
            task = sorted(target["tasks"])[0]

            def as_stored(path: str, body: bytes) -> bytes:
                if path.split("?")[0] != "/api/v1/leaderboard":
                    return body
                board = json.loads(body)
                board["boards"][0]["entries"][0]["tasks"][task] = round(target["tasks"][task] + 0.1, 4)
                return json.dumps(board).encode()

            with hostile_host(url, as_stored) as hostile:
                caught = grader_cli("log", "audit", f"{hostile}/log", "--log-key", vkey, "--board", env=env, timeout=120)
            assert caught.returncode == 1, caught.stdout + caught.stderr
            assert f"row of submission {target['submission']}: the board shows task means" in caught.stderr.replace("'", "")
    finally:
        world.ctx.db.dispose()


def test_ladder_rows_are_named_as_not_checked_before_the_end_with_why(tmp_path: Path) -> None:
    world = make_world(tmp_path, None, resamples=200, ladder_step=0.01)
    try:
        seed(world, "alice", "alice-ladder", 0.55, rng_seed=1, uploaded_ago_s=100)
        seed(world, "bob", "bob-ladder", 0.45, rng_seed=2, uploaded_ago_s=90)
        with http_server(world.ctx) as url:
            board = httpx.get(f"{url}/api/v1/leaderboard").json()
            rows = [row for b in board["boards"] for row in b["entries"]]
            assert len(rows) == 2 and all(row["ladder"] and row["report"] is None for row in rows)
            lines = audit_board(url, tmp_path / "mirror").splitlines()
        assert lines[0] == "board: 0 row(s) show the score and task means of their logged report"
        assert sorted(lines[1:]) == sorted(
            f"board: not checked: board 'zero-shot', row of submission '{row['submission']}': {LADDER_UNCHECKED}" for row in rows
        )
    finally:
        world.ctx.db.dispose()
