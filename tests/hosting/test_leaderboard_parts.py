"""Part scores stored at acceptance (and repaired for older rows); the host's private board before the end.

On SQLite and a real PostgreSQL. Expected numbers come from the partition rule
re-implemented in tests/hosting/leaderboard_world.py, not from grader.stats.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from grader.cli.main import cli
from grader.hosting.api.app import create_app
from grader.hosting.db.models import Result, ResultPart, Submission
from grader.hosting.errors import LostRace
from grader.hosting.leaderboard import parts as parts_module
from grader.hosting.leaderboard import service
from grader.hosting.server import ServeOptions, prepare
from grader.reports.model import build_report
from tests.hosting.leaderboard_world import XSS_NAME, ZERO_SHOT, Seeded, expected_order, seed, seed_demo
from tests.hosting.world import World

pytestmark = pytest.mark.board


def stored_parts(world: World, seeded: Seeded) -> ResultPart | None:
    with world.ctx.db.session() as session:
        submission = session.get(Submission, seeded.id)
        assert submission is not None and submission.result_id is not None
        return session.get(ResultPart, submission.result_id)


def assert_parts_of(row: ResultPart | None, seeded: Seeded) -> None:
    assert row is not None
    assert row.public_score == pytest.approx(seeded.public, abs=1e-12)
    assert row.private_score == pytest.approx(seeded.private, abs=1e-12)
    assert row.full_score == pytest.approx(seeded.full, abs=1e-12)
    assert row.tasks["private"] == pytest.approx(seeded.private_tasks, abs=1e-12)


def no_scoring_on_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, scoring parts fails: what still works does no grading math."""

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("part scores computed while serving a view")

    monkeypatch.setattr(parts_module, "score_parts", refuse)


def test_parts_are_stored_when_the_result_is_accepted_and_views_only_read_them(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    first = seed(world, "alice", "alice-1", 0.55, private_shift=-0.05, rng_seed=1)
    second = seed(world, "bob", "bob-1", 0.45, private_shift=0.10, rng_seed=2)
    for seeded in (first, second):  # stored by the acceptance itself: no board was viewed yet
        assert_parts_of(stored_parts(world, seeded), seeded)
    no_scoring_on_view(monkeypatch)
    client = TestClient(create_app(world.ctx))
    entries = {e["name"]: e for e in client.get("/api/v1/leaderboard").json()["boards"][0]["entries"]}
    assert entries["alice-1"]["score"] == round(first.public, 4) and entries["bob-1"]["score"] == round(second.public, 4)
    view = client.get(f"/api/v1/submissions/{first.id}", headers={"Authorization": f"Bearer {world.tokens['alice']}"}).json()
    assert view["score"] == round(first.public, 4)


@pytest.mark.slow  # the server scores the posted runs in a child process
def test_the_worker_route_stores_the_parts_of_the_result_it_accepts(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    posted = seed(world, "alice", "alice-http", 0.55, private_shift=-0.05, rng_seed=3, through=client)
    assert_parts_of(stored_parts(world, posted), posted)


def test_a_result_whose_scoring_transaction_fails_leaves_neither_result_nor_parts(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.hosting.results import recording as results

    monkeypatch.setattr(results, "finish", lambda *_args, **_kwargs: False)  # the state change loses a race: the transaction rolls back
    with pytest.raises(LostRace, match="another writer moved it"):
        seed(world, "alice", "alice-1", 0.55, rng_seed=1)
    with world.ctx.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Result)) == 0
        assert session.scalar(select(func.count()).select_from(ResultPart)) == 0
        assert session.scalars(select(Submission.state)).all() == ["running"]


def test_rows_that_predate_scoring_at_acceptance_are_repaired_at_start_and_never_on_a_read(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    old = [seed(world, name, f"{name}-old", level, without_parts=True, rng_seed=i) for i, (name, level) in enumerate((("alice", 0.5), ("bob", 0.4)))]
    new = seed(world, "carol", "carol-new", 0.6, rng_seed=7)
    assert [stored_parts(world, s) for s in old] == [None, None]
    # a server start repairs them (the same numbers acceptance would have stored) ...
    _ctx, db = prepare(ServeOptions(competition=world.ctx.competition, state_dir=world.state.root, database=world.database, workers=0))
    db.dispose()
    for seeded in (*old, new):
        assert_parts_of(stored_parts(world, seeded), seeded)
    # ... and a row still missing (accepted by a server without the hook, after the start) stays off the board until the next start
    late = seed(world, "mallory", "mallory-late", 0.3, without_parts=True, rng_seed=9)
    no_scoring_on_view(monkeypatch)
    entries = {e["name"]: e for e in service.board_json(world.ctx, "public").model_dump()["boards"][0]["entries"]}
    assert "mallory-late" not in entries and stored_parts(world, late) is None
    assert entries["carol-new"]["score"] == round(new.public, 4)


def test_a_report_without_per_query_values_is_accepted_but_stays_off_the_board(world: World) -> None:
    from grader.hosting.leaderboard.parts import PartitionScorer

    scorer = PartitionScorer(world.secret, 0.3, "c" * 64)
    assert "secret" not in repr(scorer) and world.secret.hex() not in repr(scorer)
    values = {f"q{i}": i / 10 for i in range(10)}
    tasks = [
        {
            "name": name,
            "split": "test",
            "data_digest": {"sha256": "0" * 64},
            "status": "scored",
            "measures": {"NDCG@10": sum(values.values()) / len(values)},
            "queries": {"judged": 10, "answered": 10, "missing": 0, "extra": 0},
            **({"per_query": {"measure": "NDCG@10", "values": values}} if name == "a" else {}),
        }
        for name in ("a", "b")
    ]
    now = datetime.now(UTC)
    report = build_report(
        benchmark={"name": "mini", "version": "1", "primary_measure": "NDCG@10"},
        subject={"name": "x", "kind": "onnx", "digest": {"sha256": "1" * 64}},
        tasks=tasks,
        aggregate={"measure": "NDCG@10", "score": 0.45, "complete": True, "groups": {}},
        policy="strict",
        started_at=now,
        finished_at=now,
    )
    assert scorer(report) is None  # scored on some tasks only would rank it on a different benchmark
    assert scorer({"tasks": []}) is None  # never fails an acceptance


def competition_file(world: World) -> str:
    return str(world.state.root.parent / "c.toml")


def host_admin(world: World, *args: str) -> Any:
    extra = ["--database", world.database] if world.database else []
    return CliRunner().invoke(
        cli, ["admin", "--state", str(world.state.root), *extra, "leaderboard", "--competition", competition_file(world), *args]
    )


def test_the_host_sees_the_private_board_before_the_end(world: World) -> None:
    seed_demo(world)
    result = host_admin(world, "--private", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["part"] == "private" and data["host_only"] and not data["ended"]
    zero = data["boards"][0]
    assert zero["setting"] == "zero-shot"
    ranked = [e["name"] for e in zero["entries"] if e["rank"] is not None]
    # default finals (each participant's two best public ones), best private score among them
    assert ranked == expected_order(world, ZERO_SHOT, "private") and ranked[0] == "bob-lsa"
    for e in zero["entries"]:
        assert e["score"] == round(world.by_name(e["name"]).private, 4)
    text = host_admin(world, "--private")
    assert text.exit_code == 0 and "HOST ONLY" in text.stdout and XSS_NAME in text.stdout
    public = json.loads(host_admin(world, "--json").stdout)
    assert public["part"] == "public" and not public["host_only"]
    assert [e["name"] for e in public["boards"][0]["entries"] if e["rank"] is not None] == expected_order(world, ZERO_SHOT, "public")
    # participants and anonymous users still get 404 for the private board
    client = TestClient(create_app(world.ctx))
    for headers in ({}, {"Authorization": f"Bearer {world.tokens['alice']}"}):
        assert client.get("/api/v1/leaderboard?part=private", headers=headers).status_code == 404
        assert client.get("/leaderboard.csv?part=private", headers=headers).status_code == 404


def test_the_host_board_refuses_a_secret_others_can_read_or_that_is_not_the_committed_one(world: World) -> None:
    secret_file = world.state.root / "keys" / "partition.secret"
    os.chmod(secret_file, 0o644)
    refused = host_admin(world, "--private")
    assert refused.exit_code != 0 and "readable by others" in refused.output
    os.chmod(secret_file, 0o600)
    secret_file.write_text("ab" * 32 + "\n", encoding="ascii")
    refused = host_admin(world, "--private")
    assert refused.exit_code != 0 and "does not match the commitment" in refused.output
    secret_file.unlink()
    refused = host_admin(world, "--private")
    assert refused.exit_code != 0 and "no partition secret" in refused.output
