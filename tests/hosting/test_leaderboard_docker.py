"""A real grade in the Docker sandbox: its part scores are stored when the server accepts it, and the host sees its
private score before the end (`grader admin leaderboard --private`), which no participant or visitor can reach.

Expected numbers are re-derived here from the full signed report's per-query values and the partition secret
file, by the rule of docs/statistics.md (tests/hosting/leaderboard_world.py), not by grader.stats.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from grader.hosting.db.models import ResultPart, Submission
from grader.hosting.db.session import open_database
from tests.hosting.leaderboard_world import reference_public
from tests.hosting.support import REPO, Server, admin, grader_cli, wait_for, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = [pytest.mark.docker(RUNNER_IMAGE), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def part_means(values: dict[str, dict[str, float]], secret: bytes, fraction: float) -> dict[str, float]:
    """Public and private score: each task's mean over its part (math.fsum), then the mean over tasks (mini has no groups)."""
    means: dict[str, list[float]] = {"public": [], "private": []}
    for task, per_query in sorted(values.items()):
        public = reference_public(secret, task, list(per_query), fraction)
        for part, keep in (("public", public), ("private", set(per_query) - public)):
            means[part].append(math.fsum(per_query[q] for q in keep) / len(keep))
    return {part: math.fsum(m) / len(m) for part, m in means.items()}


def test_real_grade_parts_stored_at_acceptance_and_host_sees_private_score_before_the_end(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    require_docker([RUNNER_IMAGE])
    competition = write_competition(tmp_path / "c.toml", tables={"leaderboard": {"public_fraction": 0.3}})
    server = Server(competition, tmp_path / "state", workers=1).start()
    try:
        token = admin(server.state, "add-participant", "alice").strip()
        submitted = grader_cli("submit", str(EXAMPLE), "--server", server.url, env={"GRADER_TOKEN": token})
        assert submitted.returncode == 0, submitted.stderr
        submission_id = submitted.stdout.split()[0]
        # followed in the database, not through a route: no board, page or status view may fill the parts lazily
        db = open_database(server.state, upgrade=False)

        def state() -> str | None:
            with db.session() as session:
                return session.scalar(select(Submission.state).where(Submission.id == submission_id))

        wait_for(lambda: state() in ("scored", "failed", "error"), timeout=300, what="the grade")
        assert state() == "scored"
        with db.session() as session:
            result_id = session.scalar(select(Submission.result_id).where(Submission.id == submission_id))
            row = session.get(ResultPart, result_id)
            assert row is not None  # stored by the acceptance itself
            stored = {"public": row.public_score, "private": row.private_score}
        db.dispose()
        admin(server.state, "report", submission_id, "--out", str(tmp_path / "full.dsse.json"))
        (tmp_path / "host.pub").write_bytes(httpx.get(f"{server.url}/host-key.pub").content)
        verified = grader_cli("verify", str(tmp_path / "full.dsse.json"), "--key", str(tmp_path / "host.pub"), "--json")
        assert verified.returncode == 0, verified.stderr
        report = json.loads(verified.stdout)
        values = {name: task["per_query"]["values"] for name, task in report["tasks"].items()}
        assert set(values) == {"text2code", "code2code", "code2text"}
        secret = bytes.fromhex((server.state / "keys" / "partition.secret").read_text(encoding="ascii").strip())
        expected = part_means(values, secret, 0.3)
        assert stored == pytest.approx(expected, abs=1e-12)
        # the host's private board, before the end
        host = grader_cli("admin", "--state", str(server.state), "leaderboard", "--private", "--competition", str(competition), "--json")
        assert host.returncode == 0, host.stderr
        data = json.loads(host.stdout)
        assert data["host_only"] and not data["ended"]
        (entry,) = [e for board in data["boards"] for e in board["entries"]]
        assert entry["submission"] == submission_id and entry["score"] == round(expected["private"], 4)
        # ... which participants and visitors cannot reach
        for headers in ({}, {"Authorization": f"Bearer {token}"}):
            assert httpx.get(f"{server.url}/api/v1/leaderboard", params={"part": "private"}, headers=headers).status_code == 404
        public = httpx.get(f"{server.url}/api/v1/leaderboard").json()
        assert [e["score"] for b in public["boards"] for e in b["entries"]] == [round(expected["public"], 4)]
    finally:
        server.stop()
