"""Remote workers over HTTP on a real server: registration, keys, signed results bound to the upload and the attempt, exactly once."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.hosting.keyring.worker_signing import ensure_worker_key, sign_result
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import Job
from grader.hosting.worker.hygiene import data_mismatch
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, worker_headers, write_competition


@pytest.mark.slow
def test_signed_results_from_the_lease_holder_only_exactly_once(tmp_path: Path, database_url: str | None) -> None:
    server = Server(write_competition(tmp_path / "c.toml", max_attempts=2), tmp_path / "state", workers=0, database=database_url).start()
    try:
        participant = admin(server.state, "add-participant", "kim", database=database_url).strip()
        key1 = ensure_worker_key(tmp_path / "k1")
        assert stat.S_IMODE(os.stat(tmp_path / "k1" / "grader.key").st_mode) == 0o600
        key2 = ensure_worker_key(tmp_path / "k2")
        assert ensure_worker_key(tmp_path / "k1").private_bytes_raw() == key1.private_bytes_raw()  # loaded, not regenerated
        t1 = admin(server.state, "add-worker", "w1", "--public-key", str(tmp_path / "k1" / "grader.pub"), database=database_url).strip()
        t2 = admin(server.state, "add-worker", "w2", database=database_url).strip()
        one = httpx.Client(base_url=server.url, headers=worker_headers(t1), timeout=30)
        two = httpx.Client(base_url=server.url, headers=worker_headers(t2), timeout=30)
        pem1, pem2 = (tmp_path / "k1" / "grader.pub").read_text(), (tmp_path / "k2" / "grader.pub").read_text()
        assert one.post("/api/v1/worker/key", json={"public_key": pem1}).json() == {"status": "same"}
        assert one.post("/api/v1/worker/key", json={"public_key": pem2}).status_code == 409  # not another key
        assert two.post("/api/v1/worker/key", json={"public_key": pem2}).json() == {"status": "recorded"}  # first use
        assert two.post("/api/v1/worker/key", json={"public_key": pem1}).status_code == 409

        view = HostingClient(server.url, participant).submit(REPO / "submissions_example" / "onnx-lsa")
        job = one.post("/api/v1/worker/claim", json=claim_body(stated_fingerprint(server.url, t1, key1), 5)).json()
        sid, digest = view["id"], job["upload_sha256"]
        fields = {"submission_id": sid, "attempt": 1, "upload_sha256": digest, "facts": None, "runs": {}, "failure_code": "OOM", "message": "killed"}
        body = {"attempt": 1, "failure_code": "OOM", "message": "killed"}
        url = f"/api/v1/worker/jobs/{sid}/result"
        assert one.post(url, json=body).status_code == 403  # unsigned
        assert one.post(url, json={**body, "signature": sign_result(key1, **{**fields, "attempt": 2})}).status_code == 403  # another attempt
        assert (
            one.post(url, json={**body, "signature": sign_result(key1, **{**fields, "upload_sha256": "0" * 64})}).status_code == 403
        )  # another upload
        assert one.post(url, json={**body, "signature": sign_result(key2, **fields)}).status_code == 403  # another worker's key
        assert one.post(url, json={**body, "message": "edited", "signature": sign_result(key1, **fields)}).status_code == 403  # altered after signing
        assert two.post(url, json={**body, "signature": sign_result(key2, **fields)}).status_code == 409  # not the lease holder
        assert HostingClient(server.url, participant).status(sid)["state"] == "running"
        good = {**body, "signature": sign_result(key1, **fields)}
        assert one.post(url, json=good).json() == {"status": "accepted", "state": "failed"}
        assert one.post(url, json=good).status_code == 409  # exactly once
        history = admin(server.state, "history", sid, database=database_url)
        assert history.count("-> failed") == 1 and "worker w1: attempt 1" in history  # the name reports give it, not its row id
        # a revoked worker can no longer claim
        admin(server.state, "revoke-worker", "w2", database=database_url)
        assert two.post("/api/v1/worker/claim", json=claim_body("0" * 64)).status_code == 401
        one.close()
        two.close()
    finally:
        server.stop()


@pytest.mark.slow
def test_add_worker_refuses_a_bad_key_and_a_local_name(tmp_path: Path) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    server.stop()
    bad = tmp_path / "bad.pub"
    bad.write_text("-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----\n")
    for args in (["add-worker", "x", "--public-key", str(bad)], ["add-worker", "local-1"], ["add-worker", "two words"]):
        result = CliRunner().invoke(cli, ["admin", "--state", str(server.state), *args])
        assert result.exit_code != 0 and result.stdout == "", (args, result.output)


def test_data_digest_check_before_grading(tmp_path: Path) -> None:
    """A worker checks its pseudonymous copy's corpus, queries and the job's judged ids; it refuses real data and a job that pins the judgements."""
    from grader.data.benchmark import load_benchmark_folder
    from grader.data.registry import resolve_benchmark
    from grader.hosting.protocol.worker_data import export_worker_data, pseudonymous_judged
    from grader.sandbox.blinding import BlindingKey

    benchmark = resolve_benchmark("mini")
    task = benchmark.task("text2code")
    key = BlindingKey(bytes(range(32)))
    copy = tmp_path / "copy"
    export_worker_data(benchmark, ["text2code"], ["test"], key, copy)
    judged = pseudonymous_judged(key, "text2code", task.qrels("test"))
    job = Job(
        competition="c",
        submission_id="s",
        attempt=1,
        lease_expires_at=None,
        lease_s=60,
        heartbeat_s=5,
        upload_sha256="0" * 64,
        benchmark="mini",
        tasks=["text2code"],
        split="test",
        track="hidden",
        limits={},
        judged={"text2code": judged},
        ranking_digests={"text2code": load_benchmark_folder(copy).task("text2code").ranking_digest(judged)},
    )
    assert data_mismatch(job, copy) is None
    wrong = job.model_copy(update={"ranking_digests": {"text2code": "0" * 64}})
    assert "text2code" in str(data_mismatch(wrong, copy))
    other_ids = job.model_copy(update={"judged": {"text2code": judged[1:]}})  # the digest names the judged ids too
    assert "text2code" in str(data_mismatch(other_ids, copy))
    assert "unusable" in str(data_mismatch(job, tmp_path / "nonexistent"))
    assert "no data copy" in str(data_mismatch(job, None))
    # the benchmark's own data (real ids, judgements) is no copy: refused before anything is staged
    assert "not a worker data copy" in str(data_mismatch(job, benchmark.root))
    # a job that pins the whole split (judgements included) is refused
    pinned = job.model_copy(update={"data_digests": {"text2code": task.split_digest("test")}})
    assert "refuses" in str(data_mismatch(pinned, copy))


def test_a_shard_jobs_copy_check_sees_a_corpus_changed_after_its_digest_was_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker checks a shard job's copy before forking its child, with each file's sha256 remembered per version:
    a corpus rewritten since (same size, its mtime put back) is a mismatch, not the remembered digest."""
    import os
    import time

    import grader.files
    from grader.data.benchmark import load_benchmark_folder
    from grader.data.registry import resolve_benchmark
    from grader.hosting.protocol.worker_data import export_worker_data, pseudonymous_judged
    from grader.hosting.worker.hygiene import copy_mismatch
    from grader.sandbox.blinding import BlindingKey

    monkeypatch.setattr(grader.files, "_SETTLED_NS", 0)  # the copy is seconds old: remember its digests at once
    benchmark = resolve_benchmark("mini")
    key = BlindingKey(bytes(range(32)))
    copy = tmp_path / "copy"
    export_worker_data(benchmark, ["text2code"], ["test"], key, copy)
    judged = pseudonymous_judged(key, "text2code", benchmark.task("text2code").qrels("test"))
    copied = load_benchmark_folder(copy).task("text2code")
    pinned = {"text2code": (judged, copied.ranking_digest(judged))}
    assert copy_mismatch(copy, pinned, split="test") is None
    assert copy_mismatch(copy, pinned, split="test") is None  # remembered: the same answer
    corpus = copied.corpus_path
    before, data = os.stat(corpus), bytearray(corpus.read_bytes())
    data[-2] ^= 1
    time.sleep(0.05)  # past the file system's clock tick
    corpus.write_bytes(bytes(data))
    os.utime(corpus, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert "text2code split test: pinned" in str(copy_mismatch(copy, pinned, split="test"))
    assert "not a worker data copy" in str(copy_mismatch(benchmark.root, pinned, split="test"))


@pytest.mark.slow
@pytest.mark.parametrize("token", ["", "Bearer wrong"])
def test_metrics_need_the_metrics_token(tmp_path: Path, token: str) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    try:
        assert httpx.get(f"{server.url}/metrics", headers={"Authorization": token} if token else {}).status_code == 401
        good = admin(server.state, "metrics-token").strip()
        participant = admin(server.state, "add-participant", "lee").strip()
        assert httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {participant}"}).status_code == 401
        HostingClient(server.url, participant).submit(REPO / "submissions_example" / "onnx-lsa")
        text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {good}"}).text
        assert "grader_queue_depth 1.0" in text and 'grader_submissions{state="queued"} 1.0' in text
        age = float(next(line for line in text.splitlines() if line.startswith("grader_oldest_queued_seconds")).split()[-1])
        assert 0 <= age < 600
    finally:
        server.stop()
