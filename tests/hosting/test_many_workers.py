"""Workers of a server of many competitions, through a real `grader serve --competitions` over real sockets.

The server's claim (``POST /api/v1/worker/claim``) names the competitions a worker serves and hands out their jobs
in a round robin over competitions: a flood of submissions to one does not hold back another's (on SQLite and on
PostgreSQL). A worker is registered in each competition it serves with the same token; the job names its
competition, whose own routes take everything else about it. A real `grader worker` serves only competitions whose data copy it holds. (A real
grade by a worker of many competitions, the server's local pool: tests/hosting/test_many_competitions.py.)
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.hosting.keyring.worker_signing import ensure_worker_key
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL
from grader.hosting.worker.many_loop import ManyWorker
from tests.hosting.support import REPO, ManyServer, admin, grader_cli, stated_fingerprint, worker_headers, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: Leases far longer than the test: a job claimed here stays claimed (no heartbeat is sent), so no claim sees it again.
LONG_LEASES = {"queue": {"lease_s": 600, "heartbeat_s": 30}, "quotas": {"per_day": 20, "total": 50, "concurrent": 10, "sample_per_day": 5}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("manyworkers")
    files = root / "competitions"
    files.mkdir()
    write_competition(files / "alpha.toml", name="alpha", tables=LONG_LEASES)
    write_competition(files / "beta.toml", name="beta", tables=LONG_LEASES)
    running = ManyServer(files, root / "state", workers=0).start()
    running.root = root  # type: ignore[attr-defined]
    yield running
    running.stop()


def worker_of(server: ManyServer, name: str, competitions: list[str], keys: Path) -> str:
    """Register remote worker ``name`` in each of ``competitions`` under one token (the first prints it), with its key."""
    ensure_worker_key(keys)
    public = str(keys / "grader.pub")
    token = admin(server.state, "--in", competitions[0], "add-worker", name, "--public-key", public, database=server.database).strip()
    for other in competitions[1:]:
        os.environ["GRADER_WORKER_TOKEN"] = token
        try:
            assert admin(server.state, "--in", other, "add-worker", name, "--public-key", public, "--same-token", database=server.database) == ""
        finally:
            del os.environ["GRADER_WORKER_TOKEN"]
    return token


def claim(server: ManyServer, token: str, fingerprint: str, competitions: list[str], wait_s: float = 5) -> httpx.Response:
    body = {"wait_s": wait_s, "fingerprint": fingerprint, "competitions": competitions}
    return httpx.post(f"{server.url}/api/v1/worker/claim", json=body, headers=worker_headers(token), timeout=wait_s + 60)


def claim_until_a_job(server: ManyServer, token: str, fingerprint: str, competitions: list[str]) -> dict[str, Any]:
    """Long-poll (30 s at a time, 10 times at most) until a job comes: the job."""
    for _ in range(10):
        answer = claim(server, token, fingerprint, competitions, wait_s=30)
        if answer.status_code != 204:
            assert answer.status_code == 200, answer.text
            return dict(answer.json())
    raise AssertionError("no job within 10 long-polls")


def submit(server: ManyServer, competition: str, token: str) -> str:
    return str(HostingClient(server.base(competition), token).submit(EXAMPLE)["id"])


def flood_then_claim(server: ManyServer, keys: Path) -> tuple[str, str]:
    """Six submissions to alpha, then one to beta; a worker of both claims seven jobs: its token and beta's submission,
    the the claims' order checked (round robin over competitions: beta's one job is handed out right after the first
    of alpha's six, not after all six; alpha's own order is its queue's, oldest first); nothing is left to claim."""
    token = worker_of(server, "w", ["alpha", "beta"], keys)
    key = ensure_worker_key(keys)
    fingerprint = stated_fingerprint(server.base("alpha"), token, key)
    assert stated_fingerprint(server.base("beta"), token, key) == fingerprint  # one machine: one fingerprint, bound in each
    ann = admin(server.state, "--in", "alpha", "add-participant", "ann", database=server.database).strip()
    bo = admin(server.state, "--in", "beta", "add-participant", "bo", database=server.database).strip()
    flood = [submit(server, "alpha", ann) for _ in range(6)]
    late = submit(server, "beta", bo)  # queued after the whole flood

    claimed: list[tuple[str, str]] = []
    for _ in range(7):
        answer = claim(server, token, fingerprint, ["alpha", "beta"])
        assert answer.status_code == 200, answer.text
        job = answer.json()
        claimed.append((job["competition"], job["submission_id"]))
    assert claimed[1] == ("beta", late)
    assert [sid for name, sid in claimed if name == "alpha"] == flood
    assert claim(server, token, fingerprint, ["alpha", "beta"], wait_s=0).status_code == 204
    return token, late


def test_a_flood_to_one_competition_does_not_hold_back_another(server: ManyServer, tmp_path: Path) -> None:
    token, late = flood_then_claim(server, tmp_path / "keys")

    # Everything else about a job goes to its competition's routes: beta knows the lease, alpha does not.
    beat = {"attempt": 1}
    to_beta = httpx.post(f"{server.base('beta')}/api/v1/worker/jobs/{late}/heartbeat", json=beat, headers=worker_headers(token), timeout=30)
    assert to_beta.status_code == 200
    to_alpha = httpx.post(f"{server.base('alpha')}/api/v1/worker/jobs/{late}/heartbeat", json=beat, headers=worker_headers(token), timeout=30)
    assert to_alpha.status_code == 409


def test_on_postgresql_a_flood_to_one_competition_does_not_hold_back_another(tmp_path: Path, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    """The same claims on PostgreSQL (each competition in its own schema, its own connection pool): the same order."""
    files = tmp_path / "competitions"
    files.mkdir()
    write_competition(files / "alpha.toml", name="alpha", tables=LONG_LEASES)
    write_competition(files / "beta.toml", name="beta", tables=LONG_LEASES)
    server = ManyServer(files, tmp_path / "state", workers=0, database=postgres_cluster.new_database()).start()
    try:
        flood_then_claim(server, tmp_path / "keys")
    finally:
        server.stop()


def test_a_job_goes_only_to_a_worker_that_names_its_competition(server: ManyServer, tmp_path: Path) -> None:
    token = worker_of(server, "w2", ["alpha", "beta"], tmp_path / "keys")
    key = ensure_worker_key(tmp_path / "keys")
    fingerprint = stated_fingerprint(server.base("alpha"), token, key)
    stated_fingerprint(server.base("beta"), token, key)
    cy = admin(server.state, "--in", "beta", "add-participant", "cy").strip()
    # A claim waiting on both competitions gets a job queued to beta while it waits.
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(claim_until_a_job, server, token, fingerprint, ["alpha", "beta"])
        first = submit(server, "beta", cy)
        woken = waiting.result()
    assert (woken["competition"], woken["submission_id"]) == ("beta", first)

    queued = submit(server, "beta", cy)
    assert claim(server, token, fingerprint, ["alpha"], wait_s=1).status_code == 204  # beta's job is there: not for this claim
    got = claim(server, token, fingerprint, ["beta"])
    assert got.status_code == 200 and (got.json()["competition"], got.json()["submission_id"]) == ("beta", queued)

    # A worker registered in alpha alone may not claim for beta; a competition not served is named as such.
    solo = worker_of(server, "solo", ["alpha"], tmp_path / "solo-keys")
    stated_fingerprint(server.base("alpha"), solo, ensure_worker_key(tmp_path / "solo-keys"))
    refused = claim(server, solo, fingerprint, ["alpha", "beta"], wait_s=0)
    assert refused.status_code == 401 and "competition beta" in refused.json()["detail"]
    # --same-token takes a worker's token only, and never one registered in the competition already.
    for held, words in (("not-a-token", "does not hold a worker token"), (token, "registered in this competition already")):
        again = CliRunner().invoke(
            cli, ["admin", "--state", str(server.state), "--in", "beta", "add-worker", "w9", "--same-token"], env={"GRADER_WORKER_TOKEN": held}
        )
        assert again.exit_code != 0 and words in again.output, again.output
    unknown = claim(server, token, fingerprint, ["alpha", "gamma"], wait_s=0)
    assert unknown.status_code == 404 and "gamma" in unknown.json()["detail"]
    # A worker of the previous protocol is refused before its body is read, with both versions named.
    old: dict[str, Any] = {**worker_headers(token), HEADER: "2"}
    stale = httpx.post(f"{server.url}/api/v1/worker/claim", json={"wait_s": 0}, headers=old, timeout=30)
    assert stale.status_code == 426 and f"worker protocol 2 is not this server's {WORKER_PROTOCOL}" in stale.json()["detail"]


def test_a_worker_serves_only_the_competitions_whose_copy_it_holds(server: ManyServer, tmp_path: Path) -> None:
    keys, data = tmp_path / "keys", tmp_path / "data"
    data.mkdir()
    token = worker_of(server, "w3", ["alpha", "beta"], keys)
    args = ["worker", "--server", server.url, "--data", str(data), "--key-dir", str(keys), "--min-free-disk", "1", "--competition", "beta"]
    refused = grader_cli(*args, env={"GRADER_WORKER_TOKEN": token}, timeout=120)
    assert refused.returncode != 0 and "no data copy of competition 'beta'" in refused.stderr

    admin(server.state, "--in", "beta", "export-worker-data", "--out", str(data / "beta"))
    # With the copy, but registered in alpha alone: a worker naming beta stops at its start, with the line.
    alone = worker_of(server, "alone", ["alpha"], tmp_path / "alone-keys")
    args_alone = [*args[:5], "--key-dir", str(tmp_path / "alone-keys"), *args[7:]]
    unknown = grader_cli(*args_alone, env={"GRADER_WORKER_TOKEN": alone}, timeout=120)
    assert unknown.returncode != 0 and "does not know this worker token" in unknown.stderr, unknown.stderr[-2000:]
    # Without --competition: every competition listed whose copy is here, beta alone; its routes are beta's.
    many = ManyWorker(server.url, token, data, names=None, key=None)
    try:
        many.refresh()
        assert sorted(many.served) == ["beta"]
        assert str(many.served["beta"].api.http.base_url).rstrip("/") == server.base("beta")
    finally:
        many.http.close()
