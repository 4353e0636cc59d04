"""One competition's guarantees, held by one competition of a two-competition server (docs/hosting.md).

Against a real `grader serve --competitions` with two competitions graded in the real Docker sandbox: kill -9 of the
server mid-grade loses nothing and charges nothing twice, in either competition; the served report equals a direct
`grader run` bit for bit; the end of one competition leads to its reveal by itself, which `grader log audit`
re-derives from entry 0, while the other competition runs on, its log untouched by the first's end.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from grader.hosting.participant.client import HostingClient
from tests.hosting.support import REPO, ManyServer, admin, grader_cli, wait_for, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = [pytest.mark.docker(RUNNER_IMAGE), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def _exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _vkey(server: ManyServer, name: str) -> str:
    return httpx.get(f"{server.base(name)}/log/key", timeout=30).text.strip()


def test_kill9_served_equals_direct_and_one_competitions_end_and_reveal(tmp_path: Path, docker_engine) -> None:  # type: ignore[no-untyped-def]
    require_docker([RUNNER_IMAGE])
    files = tmp_path / "competitions"
    files.mkdir()
    write_competition(files / "alpha.toml", name="alpha", tables={"quotas": {"concurrent": 3}})
    write_competition(files / "beta.toml", name="beta")
    server = ManyServer(files, tmp_path / "state", workers=1).start()
    try:
        alice_token = admin(server.state, "--in", "alpha", "add-participant", "alice").strip()
        alice = HostingClient(server.base("alpha"), alice_token)
        bob = HostingClient(server.base("beta"), admin(server.state, "--in", "beta", "add-participant", "bob").strip())
        first, second = alice.submit(EXAMPLE)["id"], alice.submit(EXAMPLE)["id"]
        third = bob.submit(EXAMPLE)["id"]
        wait_for(lambda: alice.status(first)["state"] == "running", timeout=180, interval=0.05, what="alpha's first grade running")
        workers = server.worker_pids()
        assert len(workers) == 1  # one local pool serving both competitions
        server.kill9()
        wait_for(lambda: all(_exited(pid) for pid in workers), timeout=120, what="the orphaned workers to exit")
        server.start()
        for client, submission_id in ((alice, first), (alice, second), (bob, third)):
            assert client.wait(submission_id, timeout_s=900)["state"] == "scored", submission_id
        for name, submission_id in (("alpha", first), ("alpha", second), ("beta", third)):
            assert admin(server.state, "--in", name, "history", submission_id).count("-> scored") == 1
        assert alice.quota()["hidden"]["used_total"] == 2 and bob.quota()["hidden"]["used_total"] == 1  # charged once each

        # served = direct, bit for bit, after alpha's end; beta goes on
        direct = grader_cli(
            "run", str(EXAMPLE), "--benchmark", "mini", "--split", "test", "--sandbox", "docker",
            "--time-limit", "60", "--memory", "2g", "--cpus", "1", "--out", str(tmp_path / "direct"),
        )  # fmt: skip
        assert direct.returncode == 0, direct.stderr
        expected = json.loads((tmp_path / "direct" / "report.json").read_text())
        said = admin(server.state, "--in", "alpha", "end", "--yes")
        assert "the server logs the reveal" in said
        (tmp_path / "alpha.pub").write_bytes(httpx.get(f"{server.base('alpha')}/host-key.pub", timeout=30).content)
        env = {"GRADER_TOKEN": alice_token}
        got = grader_cli("status", first, "--report", str(tmp_path / "r.json"), "--server", server.base("alpha"), env=env)
        assert got.returncode == 0, got.stderr
        verified = grader_cli("verify", str(tmp_path / "r.json"), "--key", str(tmp_path / "alpha.pub"), "--json")
        assert verified.returncode == 0, verified.stderr
        report = json.loads(verified.stdout)
        assert report["aggregate"] == expected["aggregate"]
        assert {n: t["per_query"] for n, t in report["tasks"].items()} == {n: t["per_query"] for n, t in expected["tasks"].items()}

        # alpha's reveal comes by itself and re-derives from its entry 0; beta's log holds no end
        audit_env = {"XDG_STATE_HOME": str(tmp_path / "auditor")}

        def revealed() -> bool:
            audit = grader_cli("log", "audit", f"{server.base('alpha')}/log", "--log-key", _vkey(server, "alpha"), env=audit_env, timeout=120)
            return audit.returncode == 0 and "reveal: checked against entry 0" in audit.stdout

        wait_for(revealed, timeout=120, interval=1, what="alpha's reveal, re-derived by the audit")
        beta = grader_cli("log", "audit", f"{server.base('beta')}/log", "--log-key", _vkey(server, "beta"), env=audit_env, timeout=120)
        assert beta.returncode == 0 and "reveal: not yet" in beta.stdout, beta.stdout + beta.stderr
        assert "end" not in next(line for line in beta.stdout.splitlines() if line.startswith("entries:"))
        assert httpx.get(f"{server.base('beta')}/api/v1/competition", timeout=30).json()["end"] == "2099-01-01T00:00:00Z"
        listed = {c["name"]: c["status"] for c in httpx.get(f"{server.url}/api/v1/competitions", timeout=30).json()}
        assert listed == {"alpha": "ended", "beta": "open"}
    finally:
        server.stop()
        for pid in server.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
