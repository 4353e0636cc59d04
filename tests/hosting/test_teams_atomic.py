"""Joining a team is atomic across server processes (docs/hosting.md, "Teams"): two real `grader serve` processes on
one database (a real PostgreSQL, or the SQLite file of one state folder), joins released at once at both.

Three races: six strangers join a team of one with at most 3 members (exactly 2 get in); four participants who
each uploaded once join a fresh team while the quota allows one upload a day (exactly 1 gets in: each other join
would make the team's count pass it); a member's upload and a join that brings an upload, under a quota of one
(exactly one gets through). And one code sent by two at once is taken once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from grader.hosting.participant.client import packed
from tests.hosting.support import REPO, Server, admin, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def test_joins_on_two_servers_never_pass_the_team_size_or_quota(tmp_path: Path, database_url: str | None) -> None:
    competition = write_competition(tmp_path / "c.toml", tables={"quotas": {"per_day": 1, "total": 10, "concurrent": 10}, "teams": {"max_size": 3}})
    state = tmp_path / "state"
    first = Server(competition, state, workers=0, database=database_url).start()
    second = Server(competition, state, workers=0, database=database_url)
    second.log = tmp_path / "second-server.log"
    second.start()
    try:
        tokens = {f"p{n}": admin(state, "add-participant", f"p{n}", database=database_url).strip() for n in range(12)}

        def call(n: int, who: str, method: str, path: str, **kwargs: object) -> httpx.Response:
            """``who``'s request to the first server (``n`` even) or the second (odd)."""
            server = (first, second)[n % 2]
            headers = {"Authorization": f"Bearer {tokens[who]}", "Content-Type": "application/gzip" if "content" in kwargs else "application/json"}
            return httpx.request(method, f"{server.url}{path}", headers=headers, timeout=120, **kwargs)  # type: ignore[arg-type]

        def race(jobs: list[Callable[[], httpx.Response]]) -> list[int]:
            release = threading.Barrier(len(jobs))

            def go(job: Callable[[], httpx.Response]) -> int:
                release.wait()
                return job().status_code

            with ThreadPoolExecutor(len(jobs)) as pool:
                return list(pool.map(go, jobs))

        def members(who: str) -> list[str]:
            return call(0, who, "GET", "/api/v1/team").json()["members"]  # type: ignore[no-any-return]

        # the size: a team of one, six joiners with a code each
        assert call(0, "p0", "POST", "/api/v1/team", json={"name": "size"}).status_code == 201
        codes = [call(n, "p0", "POST", "/api/v1/team/invites").json()["code"] for n in range(6)]
        joiners = [f"p{n}" for n in range(1, 7)]
        answers = race([lambda n=n, who=who: call(n, who, "POST", "/api/v1/team/join", json={"code": codes[n]}) for n, who in enumerate(joiners)])
        assert sorted(answers) == [200, 200, 409, 409, 409, 409], answers
        assert len(members("p0")) == 3
        # one code, two takers: one joins, the other is told the code is no team's
        assert call(0, "p7", "POST", "/api/v1/team", json={"name": "code"}).status_code == 201
        code = call(0, "p7", "POST", "/api/v1/team/invites").json()["code"]
        answers = race([lambda n=n: call(n, ("p8", "p9")[n], "POST", "/api/v1/team/join", json={"code": code}) for n in range(2)])
        assert sorted(answers) == [200, 404], answers
        # the quota: four participants with one upload each; a day's quota of one lets exactly one of them in
        with packed(EXAMPLE) as archive:
            body = archive.read_bytes()
        uploaders = [who for who in (f"p{n}" for n in range(1, 12)) if call(0, who, "GET", "/api/v1/team").status_code == 404][:3]
        for who in uploaders:
            posted = call(0, who, "POST", "/api/v1/submissions", content=body)
            assert posted.status_code == 201, posted.text
        (taker,) = set(members("p7")) - {"p7"}
        assert call(0, taker, "POST", "/api/v1/team/leave").status_code == 204  # a team of p7 alone, nothing uploaded
        codes = [call(n, "p7", "POST", "/api/v1/team/invites").json()["code"] for n in range(len(uploaders))]
        answers = race([lambda n=n, who=who: call(n, who, "POST", "/api/v1/team/join", json={"code": codes[n]}) for n, who in enumerate(uploaders)])
        assert sorted(answers) == [200] + [409] * (len(uploaders) - 1), answers
        assert call(0, "p7", "GET", "/api/v1/quota").json()["hidden"]["used_24h"] == 1
        # a member's upload and a join bringing an upload, at once: exactly one of them gets through
        (loser, *_rest) = [who for who in uploaders if call(0, who, "GET", "/api/v1/team").status_code == 404]
        assert call(0, taker, "POST", "/api/v1/team", json={"name": "race"}).status_code == 201  # taker has uploaded nothing
        code = call(0, taker, "POST", "/api/v1/team/invites").json()["code"]
        answers = race(
            [
                lambda: call(0, taker, "POST", "/api/v1/submissions", content=body),
                lambda: call(1, loser, "POST", "/api/v1/team/join", json={"code": code}),
            ]
        )
        assert sorted(answers) in ([200, 429], [201, 409]), answers
        assert call(0, taker, "GET", "/api/v1/quota").json()["hidden"]["used_24h"] == 1
    finally:
        first.stop()
        second.stop()
