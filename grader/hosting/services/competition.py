"""What anyone may know of the competition: its window, quotas, kinds, limits and pinned data digests."""

from __future__ import annotations

import itertools
from typing import Any

from grader import __version__
from grader.hosting.clock import iso, utcnow
from grader.hosting.config import REGRADE_CHOSEN
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Pin
from grader.hosting.schedule import End, end_of
from grader.hosting.transparency.log_store import entry_zero_keys


def competition_end(ctx: ServerContext) -> End:
    """When the competition ends and whether it has (one read: a request asks once and passes the answer on)."""
    return end_of(ctx.db, ctx.competition)


def competition_info(ctx: ServerContext) -> dict[str, Any]:
    """The competition as ``GET /api/v1/competition`` publishes it; with phases, the kinds and quotas are the open
    phase's (what an upload now is checked against), and ``phases`` lists every phase's window and rules."""
    open_phase = ctx.competition.phase_at(utcnow())
    # the phases whose choices the next phase re-grades (regrade = "chosen")
    carried = {previous.name for previous, following in itertools.pairwise(ctx.competition.phases) if following.regrade == REGRADE_CHOSEN}
    c = ctx.competition.in_phase(open_phase)
    with ctx.db.session() as session:
        pin = session.get(Pin, ctx.pin_id)
        assert pin is not None
        pinned = {"grader_version": pin.grader_version, "digests": pin.digests, "pinned_at": iso(pin.pinned_at)}
        benchmark = pin.digests.get("benchmark")
    return {
        "name": c.name,
        "title": c.title,
        "benchmark": benchmark,
        "split": ctx.split,
        "sample_split": ctx.sample_split,
        "tasks": ctx.tasks,
        "start": iso(c.start),
        "end": iso(competition_end(ctx).at),
        "kinds": list(c.kinds),
        "require_training_labels": c.require_training_labels,
        "quotas": {
            "per_day": c.quotas.per_day,
            "total": c.quotas.total,
            "concurrent": c.quotas.concurrent,
            "sample_per_day": c.quotas.sample_per_day,
        },
        "limits": c.limits.as_report(),
        "upload_max_bytes": c.upload_max_bytes,
        "phase": None if open_phase is None else open_phase.name,
        "phases": [
            {
                "name": p.name,
                "title": p.title,
                "start": iso(p.start),
                "end": iso(p.end),
                "split": p.split or ctx.split,
                "kinds": list(p.kinds),
                "ladder": p.leaderboard.ladder,
                "quotas": {"per_day": p.quotas.per_day, "total": p.quotas.total, "concurrent": p.quotas.concurrent},
                # the final choices are taken in the last phase only; an earlier one's choices are carried to the next
                "finals": p is c.phases[-1],
                "carried": p.name in carried,
            }
            for p in c.phases
        ],
        "pin": pinned,
        "grader_version": __version__,
        # The key that blinds the ids containers see: its id from day one, the key at the end (GET /api/v1/partition).
        "blinding_key_id": None if ctx.blinding_key is None else ctx.blinding_key.key_id,
        # Entry 0's commitments and key ids in entry 0's own forms (the key id above is another hash of the blinding
        # key): anyone compares them with the log's entry 0 before the reveal (docs/transparency.md).
        "log": None if ctx.log is None else log_keys(ctx),
    }


def log_keys(ctx: ServerContext) -> dict[str, Any]:
    """What entry 0 commits to of the keys this server holds now, computed as entry 0 computes it."""
    assert ctx.log is not None
    return entry_zero_keys(
        ctx.log,
        partition_commitment=ctx.partition_commitment,
        blinding_secret=None if ctx.blinding_key is None else ctx.blinding_key.secret,
        host_public_key=ctx.signing_key.public_key().public_bytes_raw(),
    )
