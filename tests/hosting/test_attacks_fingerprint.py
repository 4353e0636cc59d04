"""Against a real `grader serve` on real sockets: a worker's fingerprint is bound to it.

Before: each whole-job claim overwrote ``workers.fingerprint`` with whatever it stated, and a shard claim's
fingerprint was recorded nowhere: a worker could state any fingerprint on any claim, and so choose, claim by
claim, the workers its replicas are compared with and the tasks whose shard jobs it takes.
After (worker protocol 2): a worker states its fingerprint once (``POST /api/v1/worker/fingerprint``, signed
by a remote worker's registered key over its name, the competition's and the fingerprint); the first statement
binds it to the worker's row. A claim (whole-job or shard) or a statement naming another fingerprint is refused
(409, one line), leases nothing, is logged as a warning and counted on the row (``grader admin workers``); only
the host's ``grader admin reset-fingerprint NAME`` unbinds it. The real worker (``grader worker``) states once
and claims, and stops with one line when the server holds another fingerprint bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.hosting.keyring.worker_signing import ensure_worker_key, sign_fingerprint, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import UNBOUND
from grader.hosting.services.replication import fingerprint_digest as digest_of
from grader.hosting.worker.fingerprint import worker_fingerprint
from grader.hosting.worker.loop import WorkerApi
from grader.hosting.worker.shard_loop import FingerprintUnbound, fingerprint_digest
from tests.hosting.support import REPO, Server, admin, claim_body, grader_cli, stated_fingerprint, worker_headers, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: Another machine's fingerprint: what a worker bound to this machine's might state to pick its replicas' peers.
OTHER = {**worker_fingerprint(), "machine": "another-machine", "isa": ["avx512f"]}
PATH = "/api/v1/worker/fingerprint"


def _served(tmp_path: Path, *, sharding: bool = False) -> tuple[Server, str, str, Path]:
    """A server (no local worker) of competition ``c`` with one remote worker ``w1`` (keyed) and a queued submission."""
    tables = {"sharding": {"shard_documents": 8192}} if sharding else {}
    server = Server(write_competition(tmp_path / "c.toml", name="c", tables=tables), tmp_path / "state", workers=0).start()
    keys = tmp_path / "keys"
    ensure_worker_key(keys)
    token = admin(server.state, "add-worker", "w1", "--public-key", str(worker_public_key_path(keys))).strip()
    participant = admin(server.state, "add-participant", "pat").strip()
    submission_id = HostingClient(server.url, participant).submit(EXAMPLE)["id"]
    return server, token, submission_id, keys


def _statement(key: Ed25519PrivateKey | None, fingerprint: dict[str, Any], *, worker: str = "w1", competition: str = "c") -> dict[str, Any]:
    """A statement body, signed by ``key`` over ``worker``, ``competition`` and ``fingerprint`` (unsigned without a key)."""
    signature = None if key is None else sign_fingerprint(key, worker=worker, competition=competition, fingerprint=fingerprint)
    return {"fingerprint": fingerprint, "signature": signature}


def _worker_row(server: Server, name: str = "w1") -> dict[str, Any]:
    """The worker as the host lists it (``grader admin workers --json``)."""
    return next(row for row in json.loads(admin(server.state, "workers", "--json")) if row["name"] == name)


def _never_leased(server: Server, submission_id: str) -> bool:
    return "-> running" not in admin(server.state, "history", submission_id)


def test_a_claim_naming_another_fingerprint_than_the_bound_one_is_refused_logged_and_shown_to_the_host(tmp_path: Path) -> None:
    server, token, submission_id, keys = _served(tmp_path, sharding=True)
    try:
        bound = stated_fingerprint(server.url, token, ensure_worker_key(keys))  # the real worker's statement: this machine's
        assert bound == fingerprint_digest() and _worker_row(server)["fingerprint"] == bound
        other = digest_of(OTHER)
        assert other is not None and other != bound
        with httpx.Client(base_url=server.url, headers=worker_headers(token), timeout=30) as http:
            for route in ("/api/v1/worker/claim", "/api/v1/worker/shards/claim"):
                refused = http.post(route, json=claim_body(other, wait_s=1))
                assert refused.status_code == 409, (route, refused.text)
                detail = refused.json()["detail"]
                assert "\n" not in detail and other[:12] in detail and bound[:12] in detail and "reset-fingerprint" in detail
            # A statement of another fingerprint, signed by the worker's own key, is refused too: the first one holds.
            restated = http.post(PATH, json=_statement(ensure_worker_key(keys), OTHER))
            assert restated.status_code == 409 and other[:12] in restated.json()["detail"], restated.text
            assert _never_leased(server, submission_id)  # nothing was leased under the other fingerprint
            row = _worker_row(server)
            assert (row["fingerprint"], row["fingerprint_refusals"], row["fingerprint_refused"]) == (bound, 3, other)
            listed = next(line for line in admin(server.state, "workers").splitlines() if line.startswith("w1 "))
            assert f"REFUSED: 3 claim(s) or statement(s) of another fingerprint (last {other[:12]})" in listed
            assert "claim refused" in server.log.read_text() and "fingerprint statement refused" in server.log.read_text()
            # The same statement again is no change (200), and a claim naming the bound fingerprint takes the job.
            assert http.post(PATH, json=_statement(ensure_worker_key(keys), worker_fingerprint())).json()["fingerprint"] == bound
            job = http.post("/api/v1/worker/claim", json=claim_body(bound, wait_s=5))
            assert job.status_code == 200 and job.json()["submission_id"] == submission_id, job.text
        assert _worker_row(server)["fingerprint_refusals"] == 3
    finally:
        server.stop()


def test_a_remote_workers_statement_unsigned_or_signed_over_anything_else_binds_nothing(tmp_path: Path) -> None:
    server, token, submission_id, keys = _served(tmp_path)
    try:
        key, stranger = ensure_worker_key(keys), Ed25519PrivateKey.generate()
        mine = worker_fingerprint()
        with httpx.Client(base_url=server.url, headers=worker_headers(token), timeout=30) as http:
            assert http.get(PATH).json() == {"worker": "w1", "competition": "c", "fingerprint": None}  # what to sign over
            for why, body in (
                ("unsigned", _statement(None, mine)),
                ("another key", _statement(stranger, mine)),
                ("another worker's name", _statement(key, mine, worker="w2")),
                ("another competition", _statement(key, mine, competition="other")),
                ("another fingerprint than signed", {**_statement(key, OTHER), "fingerprint": mine}),
                ("not base64", {"fingerprint": mine, "signature": "%%%"}),
            ):
                refused = http.post(PATH, json=body)
                assert refused.status_code == 403 and "not signed by this worker's registered key" in refused.json()["detail"], (why, refused.text)
            assert http.get(PATH).json()["fingerprint"] is None  # nothing bound
            unbound = http.post("/api/v1/worker/claim", json=claim_body(fingerprint_digest(), wait_s=1))
            assert unbound.status_code == 409 and unbound.json()["detail"] == UNBOUND  # a claim before any statement: state it first
            assert _never_leased(server, submission_id)
            assert _worker_row(server)["fingerprint_refusals"] == 6  # each refused statement, seen by the host
            bound = http.post(PATH, json=_statement(key, mine))
            assert bound.status_code == 200 and bound.json()["fingerprint"] == fingerprint_digest()
    finally:
        server.stop()


def _worker_once(server: Server, token: str, keys: Path) -> tuple[int, str]:
    """The real ``grader worker --once`` (no data copy: a job it claims fails INFRA at once, and it stops); its exit and stderr."""
    ran = grader_cli(
        "worker", "--server", server.url, "--worker-token", token, "--key-dir", str(keys), "--once", env={"GRADER_WORKER_DATA": ""}, timeout=120
    )
    return ran.returncode, ran.stderr


def test_the_real_worker_states_once_and_claims_stops_on_another_binding_and_binds_anew_after_the_hosts_reset(tmp_path: Path) -> None:
    server, token, submission_id, keys = _served(tmp_path)
    try:
        # Bound first to another machine's fingerprint (a statement signed by the worker's key): the real worker, on this
        # machine, states its own at start, is refused, and stops with the server's line, having leased nothing.
        with httpx.Client(base_url=server.url, headers=worker_headers(token), timeout=30) as http:
            assert http.post(PATH, json=_statement(ensure_worker_key(keys), OTHER)).status_code == 200
        code, stderr = _worker_once(server, token, keys)
        assert code != 0 and "the server refused this worker's fingerprint: the statement's fingerprint" in stderr, stderr
        assert "Traceback" not in stderr and _never_leased(server, submission_id)

        # The host resets it: the worker's next statement binds anew, and it claims under it.
        assert "reset" in admin(server.state, "reset-fingerprint", "w1")
        assert _worker_row(server)["fingerprint"] is None
        code, stderr = _worker_once(server, token, keys)
        assert "does not match the competition's pin" in stderr, stderr  # it claimed the job (and, without data, gave it back)
        row = _worker_row(server)
        assert (row["fingerprint"], row["fingerprint_refusals"]) == (fingerprint_digest(), 1)
        assert "worker w1: attempt 1" in admin(server.state, "history", submission_id)

        # Reset while a worker runs: its next claim is told to state it (409), and it states it again, then claims.
        api = WorkerApi(server.url, token, ensure_worker_key(keys))
        assert api.bound_fingerprint() == fingerprint_digest()
        admin(server.state, "reset-fingerprint", "w1")
        with pytest.raises(FingerprintUnbound):
            api.claim(wait_s=0)
        assert api.fingerprint is None and api.bound_fingerprint() == fingerprint_digest()
        assert api.claim(wait_s=5) is not None  # the job, re-queued by the INFRA result, for attempt 2
        api.http.close()
    finally:
        server.stop()
