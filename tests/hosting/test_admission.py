"""Admission is atomic at the database: two server processes on one database never admit more than the quota.

Two real `grader serve` processes share one database (a real PostgreSQL, or
the SQLite file of one state folder); two participants each fire a burst of
concurrent uploads at both servers, all released at once, well past the daily
quota. Exactly `per_day` of each participant's uploads are admitted, the rest
refused with 429, whatever the interleaving.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from grader.hosting.participant.client import packed
from tests.hosting.distributed import TINY, tiny_submission
from tests.hosting.support import Server, admin, write_competition

pytestmark = [pytest.mark.docker(TINY), pytest.mark.slow]  # the uploads are tiny Docker submissions (packed with `docker save`); nothing is graded

PER_DAY = 3
UPLOADS_EACH = 12


def test_two_servers_admit_exactly_the_quota(tmp_path: Path, docker_engine, database_url: str | None) -> None:  # type: ignore[no-untyped-def]
    competition = write_competition(tmp_path / "c.toml", tables={"quotas": {"per_day": PER_DAY, "total": 100, "concurrent": 100}})
    state = tmp_path / "state"
    first = Server(competition, state, workers=0, database=database_url).start()  # no workers: every admitted upload stays queued
    second = Server(competition, state, workers=0, database=database_url)
    second.log = tmp_path / "second-server.log"
    second.start()
    try:
        tokens = {who: admin(state, "add-participant", who, database=database_url).strip() for who in ("ada", "bob")}
        with packed(tiny_submission(tmp_path, "tiny", TINY)) as archive:
            body = archive.read_bytes()
        release = threading.Barrier(2 * UPLOADS_EACH)

        def upload(n: int, who: str) -> tuple[str, int]:
            server = (first, second)[n % 2]
            release.wait()
            response = httpx.post(
                f"{server.url}/api/v1/submissions",
                content=body,
                headers={"Authorization": f"Bearer {tokens[who]}", "Content-Type": "application/gzip"},
                timeout=120,
            )
            return who, response.status_code

        jobs = [(n, who) for n in range(UPLOADS_EACH) for who in tokens]
        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(lambda job: upload(*job), jobs))
        for who in tokens:
            codes = sorted(code for name, code in answers if name == who)
            assert codes == [201] * PER_DAY + [429] * (UPLOADS_EACH - PER_DAY), (who, codes)
        for who, token in tokens.items():  # the database agrees, and both servers see the same
            for server in (first, second):
                quota = httpx.get(f"{server.url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}).json()["hidden"]
                assert quota["used_24h"] == PER_DAY, (who, quota)
        stored = sorted(p.name for p in (state / "uploads").glob("*.tar.gz"))
        assert len(stored) == 2 * PER_DAY, stored  # refused uploads left nothing on disk
        assert not list((state / "uploads" / "tmp").iterdir())
    finally:
        first.stop()
        second.stop()
