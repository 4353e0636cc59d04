"""Time the server's leaderboard computation: ``python bench/leaderboard.py [participants] [queries per task] [rounds]``.

Seeds a competition on mini through the service layer (tests/hosting/leaderboard_world.py) with one
scored submission per participant, then times the public board (10,000 bootstrap resamples and sign
flips, all pairs) cold and from the cache, and side by side after a new result (alternating rounds):

* parts stored at acceptance (what the server does): the view reads the stored part scores;
* parts computed on view (what it did before, and what the repair path still does for a row without them).

Both new results add one entry, so both views recompute the statistics; the difference is the part scoring.
The acceptance itself (report checks, signing, storing) is timed with and without scoring the parts.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.hosting.leaderboard_world as world_module
from grader.hosting.db.models import Result
from grader.hosting.leaderboard import parts, service
from grader.hosting.services.participants import add_participant


def timed(what, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    what(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    participants = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    world_module.QUERIES = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    world = world_module.make_world(Path(tempfile.mkdtemp()), None, resamples=10_000)
    with world.ctx.db.session() as session:
        for index in range(participants + 2 * rounds):
            add_participant(session, f"p{index:02d}")
    for index in range(participants):
        world_module.seed(world, f"p{index:02d}", f"entry-{index}", 0.3 + 0.4 * index / participants, rng_seed=index)
    cold = timed(service.board_json, world.ctx, "public")
    warm = timed(service.board_json, world.ctx, "public")
    times: dict[str, list[float]] = {"stored": [], "on view": [], "accept stored": [], "accept on view": [], "cached": []}
    for index in range(participants, participants + 2 * rounds, 2):
        # alternate, so both see the same load and board sizes
        for offset, how in ((0, "stored"), (1, "on view")):
            name = f"p{index + offset:02d}"
            accept = timed(world_module.seed, world, name, name, 0.5, rng_seed=1000 + index + offset, without_parts=how == "on view")
            times[f"accept {how}"].append(accept)
            times[how].append(timed(service.board_json, world.ctx, "public"))
            times["cached"].append(timed(service.board_json, world.ctx, "public"))
    with world.ctx.db.session() as session:
        envelope = session.scalars(select(Result.envelope_path).where(Result.envelope_path.is_not(None))).first()
    signed = parts.signed_values(envelope, world.ctx.signing_key.public_key())
    scoring = statistics.median(timed(parts.part_columns, signed, world.secret, world_module.FRACTION) for _ in range(5))
    m = {key: statistics.median(values) for key, values in times.items()}
    queries = world_module.QUERIES * len(world.ctx.tasks)
    print(
        f"{participants}+ entries x {queries} hidden queries ({len(world.ctx.tasks)} tasks), 10,000 resamples; medians of {rounds} alternating rounds"
    )
    print(f"  public board, cold (statistics computed): {cold:.2f} s; cached: {warm:.3f} s")
    print(f"  board after a new result, parts stored at acceptance: {m['stored']:.2f} s  (acceptance {m['accept stored']:.3f} s)")
    print(f"  board after a new result, parts computed on view:     {m['on view']:.2f} s  (acceptance {m['accept on view']:.3f} s)")
    print(f"  board from the cache: {m['cached']:.3f} s; scoring one result's three parts alone: {scoring * 1000:.1f} ms")
    print(f"  board after a new result, on view / stored: {m['on view'] / m['stored']:.2f}x")


if __name__ == "__main__":
    main()
