"""Time the server's leaderboard computation: ``python bench/leaderboard.py [participants] [queries per task] [rounds]``.

Seeds a competition on mini through the service layer (tests/hosting/leaderboard_world.py) with one
scored submission per participant, then times the public board (10,000 bootstrap resamples and sign
flips, all pairs) cold and from the cache, and after each new result: the acceptance (report checks,
signing, the part scores and the public-part report) and the board that follows (one more entry, so
the statistics again; the view reads the stored part scores and computes none).
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
from grader.hosting.identity.participants import create_participant
from grader.hosting.leaderboard import parts, service, values


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
            create_participant(session, f"p{index:02d}")
    for index in range(participants):
        world_module.seed(world, f"p{index:02d}", f"entry-{index}", 0.3 + 0.4 * index / participants, rng_seed=index)
    cold = timed(service.board_json, world.ctx, "public")
    warm = timed(service.board_json, world.ctx, "public")
    times: dict[str, list[float]] = {"board": [], "accept": [], "cached": []}
    for index in range(participants, participants + 2 * rounds):
        name = f"p{index:02d}"
        times["accept"].append(timed(world_module.seed, world, name, name, 0.5, rng_seed=1000 + index))
        times["board"].append(timed(service.board_json, world.ctx, "public"))
        times["cached"].append(timed(service.board_json, world.ctx, "public"))
    with world.ctx.db.session() as session:
        envelope = session.scalars(select(Result.envelope_path).where(Result.envelope_path.is_not(None))).first()
    signed = values.signed_values(envelope, world.ctx.signing_key.public_key())
    scoring = statistics.median(timed(parts.part_columns, signed, world.secret, world_module.FRACTION) for _ in range(5))
    m = {key: statistics.median(series) for key, series in times.items()}
    queries = world_module.QUERIES * len(world.ctx.tasks)
    print(f"{participants}+ entries x {queries} hidden queries ({len(world.ctx.tasks)} tasks), 10,000 resamples; medians of {2 * rounds} rounds")
    print(f"  public board, cold (statistics computed): {cold:.2f} s; cached: {warm:.3f} s")
    print(f"  board after a new result: {m['board']:.2f} s  (the acceptance, parts and public-part report included: {m['accept']:.3f} s)")
    print(f"  board from the cache: {m['cached']:.3f} s; scoring one result's three parts alone: {scoring * 1000:.1f} ms")


if __name__ == "__main__":
    main()
