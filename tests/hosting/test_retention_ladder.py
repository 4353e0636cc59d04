"""Retention in Ladder mode: the entry the Ladder shows keeps its runs, even when it is neither a final nor the raw best.

A SQLite world with signed results accepted directly (no scoring process): alice's three
submissions share one noise pattern and rise by 0.01 each, so her raw public order is
s3 > s2 > s1 while the Ladder (a fixed step of 0.2) releases only her first. Her finals
(by default her two best public) are s2 and s3; s1 is kept only because the public board
shows it. Each result's attempt gets a run folder here, as a worker's put would leave it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grader.hosting.config import RetentionPolicy
from grader.hosting.leaderboard.board import BoardInputs
from grader.hosting.services.admin import end_now
from grader.hosting.services.retention import kept_submissions, plan
from tests.hosting.leaderboard_world import make_world, seed


def test_the_ladders_released_entry_keeps_its_runs(tmp_path: Path) -> None:
    world = make_world(tmp_path, None, ladder_step=0.2)
    try:
        ids = [seed(world, "alice", f"s{n}", 0.5 + 0.01 * n, rng_seed=0, uploaded_ago_s=100 - n).id for n in (1, 2, 3)]
        bob = seed(world, "bob", "b1", 0.4, rng_seed=1).id
        for sid in [*ids, bob]:
            folder = world.ctx.state.runs_dir(sid, 1)
            folder.mkdir(parents=True)
            (folder / "text2code.run").write_bytes(b"\0" * 10)
        competition = replace(world.ctx.competition, retention=RetentionPolicy("finals-and-best"))
        board = BoardInputs.of(competition, world.ctx.signing_key.public_key(), world.secret)
        with world.ctx.db.session() as session:
            assert kept_submissions(session, competition, board) == {*ids, bob}  # s1: the Ladder's; s2, s3: finals
            assert kept_submissions(session, replace(competition, leaderboard=replace(competition.leaderboard, ladder=False)), board) == {
                ids[1],
                ids[2],
                bob,
            }
        end_now(world.ctx.db)
        assert plan(world.ctx.db, world.ctx.state, competition, board).remove == []
    finally:
        world.ctx.db.dispose()
