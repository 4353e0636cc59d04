"""Time the server's leaderboard computation: ``python bench/leaderboard.py [participants] [queries per task]``.

Seeds a competition on mini through the service layer (tests/hosting/leaderboard_world.py) with one
scored submission per participant, then times the public board (parts scored from the signed per-query
values, 10,000 bootstrap resamples and sign flips, all pairs) cold and from the cache.
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


def main() -> None:
    participants = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    world_module.QUERIES = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    world = world_module.make_world(Path(tempfile.mkdtemp()), None, resamples=10_000)
    with world.ctx.db.session() as session:
        for index in range(participants):
            add_participant(session, f"p{index:02d}")
    for index in range(participants):
        world_module.seed(world, f"p{index:02d}", f"entry-{index}", 0.3 + 0.4 * index / participants, rng_seed=index)
    start = time.perf_counter()
    service.board_json(world.ctx, "public")
    cold = time.perf_counter() - start
    start = time.perf_counter()
    service.board_json(world.ctx, "public")
    warm = time.perf_counter() - start
    queries = world_module.QUERIES * len(world.ctx.tasks)
    print(
        f"{participants} entries x {queries} hidden queries ({len(world.ctx.tasks)} tasks), 10,000 resamples: public board cold {cold:.2f} s (parts, bootstrap, all pairs), cached {warm:.3f} s"
    )


if __name__ == "__main__":
    main()
