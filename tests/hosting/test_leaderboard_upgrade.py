"""A 0.2.0 database is repaired once, at server start: part scores and public-part reports, as acceptance makes them.

0.2.0 signed a hidden grade's public-part report on its first download and could
hold results accepted without part scores. Such a state is made here the way
0.2.0 made it (results accepted without the scorer; public-part reports absent,
or present where 0.2.0 had signed one on a view); a server start must fill in
exactly what acceptance stores now, byte for byte, and leave the rest alone.
On SQLite and a real PostgreSQL.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from grader.hosting.api.app import create_app
from grader.hosting.db.models import Result, ResultPart, Submission
from grader.hosting.keyring.host_key import sign_and_store
from grader.hosting.leaderboard.public_report import public_part_report
from grader.hosting.leaderboard.values import signed_values
from grader.hosting.server import ServeOptions, prepare
from grader.reports.signing import ENVELOPE_NAME
from tests.hosting.leaderboard_world import FRACTION, Seeded, seed
from tests.hosting.world import World

pytestmark = pytest.mark.board


def result_of(world: World, seeded: Seeded) -> tuple[Result, ResultPart | None]:
    with world.ctx.db.session() as session:
        submission = session.get(Submission, seeded.id)
        assert submission is not None and submission.result_id is not None
        result = session.get(Result, submission.result_id)
        assert result is not None
        return result, session.get(ResultPart, result.id)


def public_part(world: World, seeded: Seeded) -> Path:
    result, _parts = result_of(world, seeded)
    return world.ctx.state.public_part_dir(seeded.id, result.attempt) / ENVELOPE_NAME


def as_0_2_0_signed_it_on_view(world: World, seeded: Seeded, scratch: Path) -> bytes:
    """The public-part report 0.2.0 signed on the first download: from the verified full report, with the host key."""
    result, _parts = result_of(world, seeded)
    assert result.envelope_path is not None
    signed = signed_values(result.envelope_path, world.ctx.signing_key.public_key())
    report = public_part_report(signed, world.secret, FRACTION, world.ctx.partition_commitment)
    scratch.mkdir()
    return sign_and_store(report, world.ctx.signing_key, scratch)[0].read_bytes()


def state_files(state: Path) -> dict[str, bytes]:
    return {str(p.relative_to(state)): p.read_bytes() for p in sorted(state.rglob("*")) if p.is_file() and not p.name.startswith("grader.sqlite3")}


def start(world: World) -> None:
    _ctx, db = prepare(ServeOptions(competition=world.ctx.competition, state_dir=world.state.root, database=world.database, workers=0))
    db.dispose()


def test_a_0_2_0_state_is_repaired_at_start_as_acceptance_would_have_stored_it(world: World, tmp_path: Path) -> None:
    never_viewed = seed(world, "alice", "alice-1", 0.55, private_shift=-0.05, rng_seed=1)
    viewed = seed(world, "bob", "bob-1", 0.45, private_shift=0.1, rng_seed=2)
    without_parts = seed(world, "carol", "carol-1", 0.6, rng_seed=3, without_parts=True)  # accepted by 0.2.0 without the scorer
    signed_at_acceptance = public_part(world, never_viewed).read_bytes()
    viewed_bytes = public_part(world, viewed).read_bytes()
    # the 0.2.0 state: no public-part report until a download signed one (bob's was downloaded)
    shutil.rmtree(public_part(world, never_viewed).parent)
    assert not public_part(world, without_parts).exists() and result_of(world, without_parts)[1] is None
    expected = as_0_2_0_signed_it_on_view(world, without_parts, tmp_path / "scratch")

    start(world)

    assert public_part(world, never_viewed).read_bytes() == signed_at_acceptance  # what acceptance signs, byte for byte
    assert public_part(world, viewed).read_bytes() == viewed_bytes  # one signed before is kept
    assert public_part(world, without_parts).read_bytes() == expected
    parts = result_of(world, without_parts)[1]
    assert parts is not None
    assert parts.public_score == pytest.approx(without_parts.public, abs=1e-12)
    assert parts.private_score == pytest.approx(without_parts.private, abs=1e-12)
    assert parts.full_score == pytest.approx(without_parts.full, abs=1e-12)
    assert parts.tasks["private"] == pytest.approx(without_parts.private_tasks, abs=1e-12)

    # once: a second start finds nothing to do and changes nothing
    files = state_files(world.state.root)
    with world.ctx.db.session() as session:
        stored = {row.result_id: row.computed_at for row in session.query(ResultPart).all()}
    start(world)
    assert state_files(world.state.root) == files
    with world.ctx.db.session() as session:
        assert {row.result_id: row.computed_at for row in session.query(ResultPart).all()} == stored

    # the repaired rows are served as read: on the board, and the public-part report as signed at the start
    client = TestClient(create_app(world.ctx))
    entries = {e["name"]: e for e in client.get("/api/v1/leaderboard").json()["boards"][0]["entries"]}
    assert entries["carol-1"]["score"] == round(without_parts.public, 4)
    download = client.get(f"/api/v1/submissions/{without_parts.id}/report", headers={"Authorization": f"Bearer {world.tokens['carol']}"})
    assert download.status_code == 200 and download.content == expected
