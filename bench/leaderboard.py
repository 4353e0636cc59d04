"""Time the server's leaderboard computation: ``python bench/leaderboard.py [participants] [queries per task]``.

Seeds a competition on mini through the service layer (tests/hosting/leaderboard_world.py) with one
scored submission per participant, then times the public board (10,000 bootstrap resamples and sign
flips, all pairs) cold and from the cache, and side by side after a new result:

* parts stored at acceptance (what the server does): the view reads the stored part scores;
* parts computed on view (what it did before, and what the repair path still does for a row without them).

Both new results add one entry, so both views recompute the statistics; the difference is the part scoring.
The acceptance itself (report checks, signing, storing) is timed with and without scoring the parts.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.hosting.leaderboard_world as world_module
from grader.hosting.leaderboard import service
from grader.hosting.services.participants import add_participant


def timed(what, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    what(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    participants = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    world_module.QUERIES = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    world = world_module.make_world(Path(tempfile.mkdtemp()), None, resamples=10_000)
    with world.ctx.db.session() as session:
        for index in range(participants + 2):
            add_participant(session, f"p{index:02d}")
    for index in range(participants):
        world_module.seed(world, f"p{index:02d}", f"entry-{index}", 0.3 + 0.4 * index / participants, rng_seed=index)
    cold = timed(service.board_json, world.ctx, "public")
    warm = timed(service.board_json, world.ctx, "public")
    level = 0.3 + 0.4 * participants / (participants + 2)
    accept_with = timed(world_module.seed, world, f"p{participants:02d}", "new-stored", level, rng_seed=1000)
    after_stored = timed(service.board_json, world.ctx, "public")
    cached_stored = timed(service.board_json, world.ctx, "public")
    accept_without = timed(world_module.seed, world, f"p{participants + 1:02d}", "new-on-view", level, rng_seed=1001, without_parts=True)
    after_on_view = timed(service.board_json, world.ctx, "public")
    cached_on_view = timed(service.board_json, world.ctx, "public")
    queries = world_module.QUERIES * len(world.ctx.tasks)
    print(f"{participants} entries x {queries} hidden queries ({len(world.ctx.tasks)} tasks), 10,000 resamples")
    print(f"  public board, cold (statistics computed): {cold:.2f} s; cached: {warm:.3f} s")
    print(
        f"  after a new result, parts stored at acceptance: board {after_stored:.2f} s (cached {cached_stored:.3f} s); acceptance {accept_with:.3f} s"
    )
    print(
        f"  after a new result, parts computed on view:     board {after_on_view:.2f} s (cached {cached_on_view:.3f} s); acceptance {accept_without:.3f} s"
    )
    print(f"  board after a new result, on view / stored: {after_on_view / after_stored:.2f}x")


if __name__ == "__main__":
    main()
