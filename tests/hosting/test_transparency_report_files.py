"""Failed grades and missing files: a failed hidden grade's report waits for the end but its log entry's proof reaches its
participant at once; a lost report file leaves the board up, its row saying so, and `grader log audit --board` names it.

Served over a real socket; the audit runs as the `grader` command a participant runs.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from grader.hosting.results.recording import WITHHELD
from grader.transparency.entries import decode_entry
from grader.transparency.merkle import leaf_hash
from grader.transparency.note import NoteVerifier
from grader.transparency.proof import TlogProof
from tests.hosting.browser import http_server
from tests.hosting.leaderboard_world import QUERIES, make_world, seed, seed_demo
from tests.hosting.support import admin, grader_cli
from tests.hosting.transparency_support import restarted
from tests.hosting.world import World

pytestmark = pytest.mark.slow  # each test serves its competition on a socket


def envelope_of(world: World, submission_id: str) -> Path:
    """Where the server keeps the full signed report of ``submission_id``'s current result."""
    with world.ctx.db.engine.begin() as connection:
        path = connection.execute(
            text("SELECT r.envelope_path FROM results r JOIN submissions s ON s.result_id = r.id WHERE s.id = :id"), {"id": submission_id}
        ).scalar_one()
    return Path(path)


def test_a_missing_report_file_leaves_the_board_up_its_row_says_so_and_the_audit_names_it(tmp_path: Path) -> None:
    world = make_world(tmp_path, None, resamples=200)
    try:
        seed_demo(world)
        with http_server(world.ctx) as url:
            target = httpx.get(f"{url}/api/v1/leaderboard").json()["boards"][0]["entries"][0]
            envelope_of(world, target["submission"]).unlink()  # lost from the disk (a bad restore, a slip of the operator)
            restarted()
            answer = httpx.get(f"{url}/api/v1/leaderboard")
            assert answer.status_code == 200, answer.text  # was 500 for everyone
            rows = {row["submission"]: row for board in answer.json()["boards"] for row in board["entries"]}
            row = rows.pop(target["submission"])
            assert (row["unavailable"], row["score"], row["tasks"], row["rank"]) == ("report unavailable", None, {}, None)
            assert rows and all(other["score"] is not None and "unavailable" not in other for other in rows.values())
            page = httpx.get(f"{url}/")
            assert page.status_code == 200 and "report unavailable" in page.text
            assert httpx.get(f"{url}/leaderboard.csv").status_code == 200
            assert httpx.get(f"{url}{row['report']}").status_code == 404
            own = httpx.get(f"{url}/api/v1/submissions/{row['submission']}", headers={"Authorization": f"Bearer {world.tokens[row['participant']]}"})
            assert own.status_code == 200 and (own.json()["score"], own.json()["part"]) == (None, "report unavailable")
            vkey = httpx.get(f"{url}/log/key").text.strip()
            audit = grader_cli(
                "log", "audit", f"{url}/log", "--log-key", vkey, "--board", env={"XDG_STATE_HOME": str(tmp_path / "user")}, timeout=120
            )
        assert audit.returncode == 1, audit.stdout + audit.stderr
        assert f"row of submission '{row['submission']}': its report '{row['report']}' is unavailable" in audit.stderr
    finally:
        world.ctx.db.dispose()


def test_a_failed_hidden_grades_proof_comes_at_once_and_its_report_at_the_end(tmp_path: Path) -> None:
    world = make_world(tmp_path, None, resamples=200)
    try:
        failed_task, scored_task = world.ctx.tasks[0], world.ctx.tasks[1]
        graded = seed(world, "alice", "half-failed", 0.5, rng_seed=3, failed=failed_task)
        auth = {"Authorization": f"Bearer {world.tokens['alice']}"}
        with http_server(world.ctx) as url:
            mine = f"{url}/api/v1/submissions/{graded.id}"
            view = httpx.get(mine, headers=auth).json()
            assert (view["state"], view["failure_code"], view["report_available"]) == ("failed", "OOM", False)
            assert httpx.get(f"{mine}/report", headers=auth).status_code == 404  # until the end
            answer = httpx.get(f"{mine}/report.tlog-proof", headers=auth)
            assert answer.status_code == 200, answer.text  # at once
            proof = TlogProof.parse(answer.content)
            assert proof.extra is not None
            entry = decode_entry(proof.extra)
            verifier = NoteVerifier.from_vkey(httpx.get(f"{url}/log/key").text)
            proof.verify(leaf_hash(proof.extra), [verifier], origin=verifier.name)
            assert (entry["kind"], entry["status"]) == ("report", "failed")
            # Why it waits: the grade's other task scored over the whole hidden split, its private queries included.
            withheld = envelope_of(world, graded.id).read_bytes()
            assert hashlib.sha256(withheld).hexdigest() == entry["envelope_sha256"]
            report = json.loads(base64.b64decode(json.loads(withheld)["payload"]))
            report = report.get("predicate", report)
            assert len(report["tasks"][scored_task]["per_query"]["values"]) == QUERIES
            assert report["tasks"][failed_task]["failure"]["message"] == WITHHELD
            admin(world.state.root, "end", "--yes", database=world.database)
            published = httpx.get(f"{mine}/report", headers=auth)
            assert published.status_code == 200 and published.content == withheld  # the report the entry named at once
            assert TlogProof.parse(httpx.get(f"{mine}/report.tlog-proof", headers=auth).content).index == proof.index
    finally:
        world.ctx.db.dispose()
