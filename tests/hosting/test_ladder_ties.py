"""Ladder mode: entries whose released scores tie are ordered by a keyed hash, not by their raw public scores, which the Ladder hides.

The Ladder releases a public best rounded to its margin, so that small differences carry no
information. Its board used a stable sort on the released score, which kept the raw-score order
among ties and leaked the very differences the rounding withholds. Ties are now ordered by
HMAC-SHA256 of the submission id under the partition secret: recomputable after the reveal,
independent of the raw scores, out of any participant's hands.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from fastapi.testclient import TestClient

from grader.hosting.api.app import create_app
from grader.hosting.identity.participants import create_participant
from tests.hosting.leaderboard_world import make_world, seed

#: A step this wide rounds every level below to the same released score, 0.5.
STEP = 0.5
LEVELS = {"alice": 0.45, "bob": 0.42, "carol": 0.39, "mallory": 0.36, "dave": 0.33, "erin": 0.30}


def reference_tie_key(secret: bytes, submission_id: str) -> bytes:
    """The documented tie key, written out independently of the server's code."""
    return hmac.new(secret, b"grader ladder tie order v1\x00" + submission_id.encode(), hashlib.sha256).digest()


def test_ties_in_released_scores_are_ordered_by_a_keyed_hash_not_by_raw_scores(tmp_path: Path) -> None:
    world = make_world(tmp_path, None, ladder_step=STEP)
    with world.ctx.db.session() as session:
        for name in ("dave", "erin"):
            world.tokens[name] = create_participant(session, name)[1]
    seeded = {who: seed(world, who, f"{who}-1", level, rng_seed=n) for n, (who, level) in enumerate(LEVELS.items())}
    raw_order = [s.id for s in sorted(seeded.values(), key=lambda s: -s.public)]
    assert len({round(s.public / STEP) * STEP for s in seeded.values()}) == 1  # all tie once released
    board = TestClient(create_app(world.ctx)).get("/api/v1/leaderboard").json()["boards"][0]
    shown = [e["submission"] for e in board["entries"] if not e["baseline"]]
    assert sorted(shown) == sorted(raw_order)
    assert {e["score"] for e in board["entries"] if not e["baseline"]} == {STEP}
    assert {e["rank"] for e in board["entries"] if not e["baseline"]} == {1}  # ties share the rank
    expected = sorted(raw_order, key=lambda sid: reference_tie_key(world.secret, sid))
    assert shown == expected
    # Six entries: a stable sort would have shown the raw order; the keyed order differs from it here.
    assert shown != raw_order
    world.ctx.db.dispose()
