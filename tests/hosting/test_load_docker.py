"""Load: 300 submissions from 30 participants, 3 `grader worker --broker` processes, tiny images, one task of mini.

All end, quotas are exact (the 11th upload of a participant is refused), each
participant's jobs start in upload order, nothing is graded twice, and the
time from upload to `running` is printed (median, 95th percentile).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from grader.hosting.errors import RefusedSubmission
from grader.hosting.participant.client import packed
from tests.hosting.distributed import TINY, deploy, tiny_submission
from tests.hosting.redis import redis_server  # noqa: F401 - a fixture
from tests.hosting.support import admin

pytestmark = [pytest.mark.docker(TINY), pytest.mark.slow]

PARTICIPANTS, EACH, WORKERS = 30, 10, 3


def test_300_submissions_30_participants_3_workers(tmp_path: Path, docker_engine, redis_server, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from grader.hosting.db.models import Attempt, Submission
    from grader.hosting.db.session import open_database

    quotas = {"per_day": EACH, "total": EACH, "concurrent": EACH, "sample_per_day": 1}
    d = deploy(
        tmp_path,
        broker=redis_server.url,
        database=postgres_cluster.new_database(),
        workers=WORKERS,
        quotas=quotas,
        tasks=["text2code"],
        queue={"lease_s": 30, "heartbeat_s": 3, "redispatch_s": 5, "reap_every_s": 1},
    )
    try:
        clients = [d.participant(f"p{n:02d}")[1] for n in range(PARTICIPANTS)]
        order: dict[str, list[str]] = {}
        with packed(tiny_submission(tmp_path, "tiny")) as archive:  # one ~1 MB upload, sent 300 times
            for _ in range(EACH):
                for n, client in enumerate(clients):
                    order.setdefault(f"p{n:02d}", []).append(client.upload(archive)["id"])
            with pytest.raises(RefusedSubmission):
                clients[0].upload(archive)  # the quota is exact
        ids = [sid for sids in order.values() for sid in sids]
        assert len(ids) == len(set(ids)) == PARTICIPANTS * EACH
        rows = d.wait_all_terminal(ids, timeout=900)
        assert {row["state"] for row in rows.values()} == {"scored"}
        assert all(row["attempt"] == 1 for row in rows.values())
        db = open_database(d.server.state, d.server.database)
        with db.session() as session:
            uploaded = {s.id: s.uploaded_at for s in session.scalars(select(Submission)).all()}
            claimed = {a.submission_id: a.claimed_at for a in session.scalars(select(Attempt).where(Attempt.number == 1)).all()}
        db.dispose()
        for sids in order.values():  # each participant's jobs started in the order they were uploaded
            starts = [claimed[sid] for sid in sids]
            assert starts == sorted(starts)
        waits = sorted((claimed[sid] - uploaded[sid]).total_seconds() for sid in ids)
        p95 = waits[int(0.95 * (len(waits) - 1))]
        print(
            f"\nload: {len(ids)} submissions, {WORKERS} workers: upload->running median {statistics.median(waits):.1f} s, p95 {p95:.1f} s, max {waits[-1]:.1f} s"
        )
        graded_by: dict[str, int] = {}
        for sid in ids:
            history = admin(d.server.state, "history", sid, database=d.server.database).splitlines()
            assert sum("-> scored" in line for line in history) == 1
            scored = next(line for line in history if "-> scored" in line)
            named = re.search(r"  worker (\S+): ", scored)  # the worker's name, as its reports give it
            assert named, scored
            graded_by[named.group(1)] = graded_by.get(named.group(1), 0) + 1
        assert len(graded_by) == WORKERS, graded_by  # every worker took a share
        d.check_invariants(ids[:20])
    finally:
        for worker in d.workers:
            worker.stop()
        d.server.stop()
