"""The transparency log through a real `grader serve`: one server for the module, restarted only where a
test is about a restart.

What a participant gets (a receipt with its proof and entry key; a report with its proof), a grade failed without a
report logged as its outcome, what `grader verify --log`
and `grader log audit URL` check, what the log routes never show, and the tampering each catches: a database
restored from an older copy (the server refuses to start and says why), a history rewritten and re-signed, and a
report deleted with its entry and the tree re-signed (verify and audit print both signed checkpoints; the report and
its proof alone are enough). The worker's part is played by the test: it puts compact runs and posts facts.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text

from grader.cli.log_fetch import mirror
from grader.data.benchmark import BenchmarkSpec
from grader.data.registry import resolve_benchmark
from grader.grading.scoring import facts_of
from grader.hosting.clock import utcnow
from grader.hosting.config import DEPTH, load_competition
from grader.hosting.db.models import Setting, Submission
from grader.hosting.db.session import open_database
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.participant.client import HostingClient
from grader.reports.model import build_report
from grader.runs.compact import canonical_order, encode_run, run_digest
from grader.runs.run import Run
from grader.sandbox.blinding import SCHEME
from grader.transparency.entries import PUBLIC_VOCABULARY_FIELDS, decode_entry, entry_opens
from grader.transparency.merkle import leaf_hash
from grader.transparency.mirror import read_log_folder
from grader.transparency.note import NoteVerifier, open_note
from grader.transparency.proof import TlogProof
from tests.hosting.support import REPO, Server, admin, claim_body, grader_cli, stated_fingerprint, worker_headers, write_competition

pytestmark = pytest.mark.slow  # a real server, and `grader` subprocesses

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


@dataclass
class Served:
    """The module's server, its participant, one graded sample submission and where its report and proof were saved."""

    server: Server
    root: Path
    token: str
    worker: str
    vkey: str
    receipt: dict[str, Any]
    submission_id: str
    report: Path
    public_key: Path
    upload_sha256: str


def _worker_token(state: Path, name: str) -> str:
    db = open_database(state)
    with db.session() as session:
        token = rekey_local_worker(session, name)
    db.dispose()
    return token


def _post_report(server: Server, worker: str, submission_id: str, competition_file: Path) -> None:
    """Claim the job as a local worker, put a ranking of each task as a compact run and post the facts naming them:
    the server scores the runs and signs the report (no container: the worker's part is done here)."""
    client = httpx.Client(base_url=server.url, headers=worker_headers(worker), timeout=30)
    job = client.post("/api/v1/worker/claim", json=claim_body(stated_fingerprint(server.url, worker), 5)).json()
    assert job["submission_id"] == submission_id, job
    db = open_database(server.state)
    with db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        content_digest = submission.content_digest
        blinding_id = session.scalar(select(Setting.value).where(Setting.key == "blinding_key_id"))
    db.dispose()
    tasks = sorted(job["judged"])
    facts = facts_of(
        build_report(  # what a worker states: its report without scores, counts or digests
            benchmark={"name": "mini", "version": "1", "primary_measure": "NDCG@10"},
            subject={"name": "onnx-lsa", "kind": "onnx", "digest": {"sha256": content_digest}},
            tasks=[
                {
                    "name": task,
                    "split": job["split"],
                    "data_digest": {"sha256": "0" * 64},
                    "status": "scored",
                    "failure": None,
                    "measures": {"NDCG@10": 0.5},
                    "queries": {"judged": 2, "answered": 2, "missing": 0, "extra": 0},
                }
                for task in tasks
            ],
            aggregate=BenchmarkSpec(name="mini", version="1", primary_measure="NDCG@10", tasks=tuple(tasks), groups={}).aggregate(
                {task: 0.5 for task in tasks}
            ),
            policy="strict",
            started_at=utcnow(),
            finished_at=utcnow(),
            sandbox={"kind": "docker", "blinding": {"scheme": SCHEME, "key_id": blinding_id}},
        )
    )
    benchmark = resolve_benchmark(load_competition(competition_file).benchmark_target())
    runs = {}
    for name in tasks:
        corpus = canonical_order([document.id for document in benchmark.task(name).iter_corpus()])
        queries = canonical_order(job["judged"][name])
        data = encode_run(Run.from_mapping({query: {corpus[0]: 1.0} for query in queries}), corpus=corpus, queries=queries, depth=DEPTH)
        put = client.put(f"/api/v1/worker/jobs/{submission_id}/runs/{name}", params={"attempt": job["attempt"]}, content=data)
        assert put.status_code == 200, put.text
        runs[name] = run_digest(data)
    answer = client.post(f"/api/v1/worker/jobs/{submission_id}/result", json={"attempt": job["attempt"], "facts": facts, "runs": runs})
    assert answer.status_code == 200 and answer.json()["status"] == "accepted", answer.text
    client.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("tlog")
    # The test plays the worker and sends no heartbeats while it builds the runs and the server scores them: a lease
    # long enough for a loaded machine, else the reaper hands the attempt on and the result is (rightly) stale.
    competition = write_competition(root / "c.toml", name="tlog-comp", tables={"queue": {"lease_s": 900.0}})
    server = Server(competition, root / "state", workers=0).start()
    try:
        token = admin(server.state, "add-participant", "alice").strip()
        worker = _worker_token(server.state, "remote-1")
        view = HostingClient(server.url, token).submit(EXAMPLE, sample=True)
        _post_report(server, worker, view["id"], root / "c.toml")
        report = root / "report.dsse.json"
        report.write_bytes(HostingClient(server.url, token).report(view["id"]))
        proof = HostingClient(server.url, token).report_proof(view["id"])
        assert proof is not None
        (root / "report.dsse.json.tlog-proof").write_bytes(proof)
        public_key = root / "grader.pub"
        public_key.write_bytes(httpx.get(f"{server.url}/host-key.pub").content)
        vkey = httpx.get(f"{server.url}/log/key").text.strip()
        yield Served(server, root, token, worker, vkey, view["receipt"], view["id"], report, public_key, view["sha256"])
    finally:
        server.stop()


def _cli(served: Served, *args: str) -> Any:
    return grader_cli(*args, env={"XDG_STATE_HOME": str(served.root / "user-state")}, timeout=120)


def _copy_database(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (its WAL included), replacing ``target`` and its -wal/-shm files."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(source) as reading, sqlite3.connect(target) as writing:
        reading.backup(writing)
    writing.close()
    reading.close()


def _entries(served: Served) -> list[bytes]:
    """The served log, downloaded and checked (checkpoint, tiles, bundles) as an auditor does."""
    folder = served.root / "mirror"
    shutil.rmtree(folder, ignore_errors=True)
    result = _cli(served, "log", "audit", f"{served.server.url}/log", "--log-key", served.vkey, "--board", "--host")
    assert result.returncode == 0, result.stderr
    assert "row(s) show the score and task means of their logged report" in result.stdout, result.stdout  # sample runs: no board rows
    assert "host: serves entry 0's partition commitment and host key" in result.stdout, result.stdout
    mirror(f"{served.server.url}/log", folder, NoteVerifier.from_vkey(served.vkey))
    return list(read_log_folder(folder, [NoteVerifier.from_vkey(served.vkey)]).entries)


def test_the_upload_answer_carries_its_receipt_with_proof_and_entry_key(served: Served) -> None:
    receipt = served.receipt
    entry = receipt["entry"].encode()
    decoded = decode_entry(entry)
    assert decoded["kind"] == "receipt" and receipt["index"] >= 1
    proof = TlogProof.parse(receipt["proof"].encode())
    checkpoint = proof.verify(leaf_hash(entry), [NoteVerifier.from_vkey(served.vkey)])
    assert checkpoint.origin == "grader-log/tlog-comp" and checkpoint.size > receipt["index"]
    key = bytes.fromhex(receipt["entry_key"])
    assert entry_opens(decoded, key, participant="alice", submission=served.submission_id)
    assert not entry_opens(decoded, key, participant="bob", submission=served.submission_id)
    # `grader submit --receipt FILE` keeps it: the entry, its key and index, and the proof beside it
    saved = served.root / "receipt.json"
    submitted = grader_cli(
        "submit", str(EXAMPLE), "--sample", "--receipt", str(saved), env={"GRADER_SERVER": served.server.url, "GRADER_TOKEN": served.token}
    )
    assert submitted.returncode == 0, submitted.stderr
    kept = json.loads(saved.read_text())
    assert set(kept) == {"index", "entry", "entry_key", "leaf_hash"} and kept["index"] > receipt["index"]
    (served.root / "receipt.entry").write_text(kept["entry"])
    checked = _cli(served, "log", "verify-proof", f"{saved}.tlog-proof", "--entry", str(served.root / "receipt.entry"), "--log-key", served.vkey)
    assert checked.returncode == 0 and checked.stdout.startswith(f"verified: receipt entry {kept['index']} is in log grader-log/tlog-comp"), checked
    # and the receipt file itself, as `grader submit --receipt` wrote it
    checked = _cli(served, "log", "verify-proof", f"{saved}.tlog-proof", "--entry", str(saved), "--log-key", served.vkey)
    assert checked.returncode == 0 and checked.stdout.startswith(f"verified: receipt entry {kept['index']} is in log grader-log/tlog-comp"), checked


def test_verify_checks_the_report_is_logged_offline_and_against_the_served_log(served: Served) -> None:
    offline = _cli(served, "verify", str(served.report), "--key", str(served.public_key), "--log-key", served.vkey)
    assert offline.returncode == 0, offline.stderr
    assert "logged: report entry" in offline.stdout
    online = _cli(
        served, "verify", str(served.report), "--key", str(served.public_key), "--log-key", served.vkey, "--log", f"{served.server.url}/log"
    )
    assert online.returncode == 0, online.stderr
    assert "log: its newest checkpoint" in online.stdout
    # another report's envelope with this proof: refused, nothing on stdout
    other = served.root / "other.dsse.json"
    other.write_bytes(served.report.read_bytes().replace(b"{", b"{ ", 1))
    shutil.copy(str(served.report) + ".tlog-proof", str(other) + ".tlog-proof")
    refused = _cli(served, "verify", str(other), "--key", str(served.public_key), "--log-key", served.vkey)
    assert refused.returncode == 1 and refused.stdout == ""


def test_the_log_routes_name_no_participant_and_no_two_entries_share_a_value(served: Served) -> None:
    entries = _entries(served)
    kinds = [decode_entry(entry)["kind"] for entry in entries]
    assert kinds[0] == "competition" and "receipt" in kinds and "report" in kinds
    served_bytes = b"".join(entries) + httpx.get(f"{served.server.url}/log/checkpoint").content
    for secret in ("alice", served.submission_id, served.token, served.upload_sha256):
        assert secret.encode() not in served_bytes, secret
    values: dict[str, int] = {}
    for index, entry in enumerate(entries[1:], start=1):
        for name, value in decode_entry(entry).items():
            if name in PUBLIC_VOCABULARY_FIELDS or name == "time":
                continue
            assert str(value) not in values, f"entries {values.get(str(value))} and {index} share {name}"
            values[str(value)] = index
    # the leaderboard page shows the log's size and root, and links it
    note = httpx.get(f"{served.server.url}/log/checkpoint").text
    page = httpx.get(f"{served.server.url}/").text
    assert f'<span id="log-size">{note.splitlines()[1]}</span>' in page and note.splitlines()[2] in page and 'href="/log/checkpoint"' in page
    # tiles: full ones immutable, the rest briefly cached; nothing past the published tree
    level0 = httpx.get(f"{served.server.url}/log/tile/0/000.p/{len(entries)}")
    assert level0.status_code == 200 and "max-age=5" in level0.headers["cache-control"]
    assert httpx.get(f"{served.server.url}/log/tile/0/000.p/{len(entries) + 1}").status_code == 404
    assert httpx.get(f"{served.server.url}/log/tile/0/x000/000").status_code == 404


def test_admin_events_are_logged_and_a_retraction_is_an_entry_not_a_deletion(served: Served) -> None:
    before = len(_entries(served))
    cancelled = HostingClient(served.server.url, served.token).submit(EXAMPLE, sample=True)
    assert cancelled["receipt"]["index"] == before
    admin(served.server.state, "cancel", cancelled["id"])
    said = admin(served.server.state, "log-retract", str(before), "--admin", "host", "--reason", "uploaded by mistake")
    assert said.strip() == f"retraction of entry {before} logged as entry {before + 2}"
    entries = _entries(served)
    assert [decode_entry(entry)["kind"] for entry in entries[before:]] == ["receipt", "cancellation", "retraction"]
    audit = _cli(served, "log", "audit", f"{served.server.url}/log", "--log-key", served.vkey)
    assert audit.returncode == 0 and f"retracted: {before}" in audit.stdout, audit.stdout + audit.stderr


def test_a_grade_that_failed_without_a_report_is_logged_as_its_outcome(served: Served) -> None:
    before = len(_entries(served))
    HostingClient(served.server.url, served.token).submit(EXAMPLE, sample=True)  # at least one job waits
    client = httpx.Client(base_url=served.server.url, headers=worker_headers(served.worker), timeout=30)
    job = client.post("/api/v1/worker/claim", json=claim_body(stated_fingerprint(served.server.url, served.worker), 5)).json()
    answer = client.post(f"/api/v1/worker/jobs/{job['submission_id']}/result", json={"attempt": job["attempt"], "failure_code": "OOM"})
    client.close()
    assert answer.status_code == 200 and answer.json() == {"status": "accepted", "state": "failed"}, answer.text
    added = [decode_entry(entry) for entry in _entries(served)[before:]]
    assert [entry["kind"] for entry in added] == ["receipt", "outcome"]
    assert (added[1]["status"], added[1]["failure_code"], added[1]["attempt"]) == ("failed", "OOM", job["attempt"])


def test_a_database_restored_from_an_older_copy_is_refused_at_start(served: Served) -> None:
    server, database = served.server, served.server.state / "grader.sqlite3"
    server.stop()
    older = served.root / "older.sqlite3"
    _copy_database(database, older)
    server.start()
    HostingClient(server.url, served.token).submit(EXAMPLE, sample=True)  # the log grows past the copy
    server.stop()
    newer = served.root / "newer.sqlite3"
    _copy_database(database, newer)
    _copy_database(older, database)
    refused = server.start(expect_ok=False)
    assert refused.process is not None and refused.process.wait(120) != 0
    said = server.log.read_text(encoding="utf-8", errors="replace")
    assert "the database is older than the log already published" in said, said[-2000:]
    _copy_database(newer, database)
    server.start()


def test_a_history_rewritten_and_re_signed_is_caught_by_verify_and_audit(served: Served) -> None:
    server = served.server
    seen = _cli(served, "log", "audit", f"{server.url}/log", "--log-key", served.vkey)  # the user has seen the log now
    assert seen.returncode == 0, seen.stderr
    server.stop()
    # The host drops the receipt of the first upload, renumbers what follows, and signs the new tree afresh.
    db = open_database(server.state)
    with db.engine.begin() as connection:
        dropped = served.receipt["index"]
        connection.execute(text("DELETE FROM log_entries WHERE idx = :i"), {"i": dropped})
        connection.execute(text("UPDATE log_entries SET idx = -idx WHERE idx > :i"), {"i": dropped})
        connection.execute(text("UPDATE log_entries SET idx = -idx - 1 WHERE idx < 0"))
    db.dispose()
    (server.state / "log" / "checkpoint").unlink()
    server.start()
    verify = _cli(served, "verify", str(served.report), "--key", str(served.public_key), "--log-key", served.vkey, "--log", f"{server.url}/log")
    assert verify.returncode == 1 and verify.stdout == ""
    assert "checkpoint seen before" in verify.stderr and "checkpoint now" in verify.stderr
    assert verify.stderr.count("\u2014 grader-log/tlog-comp ") == 2, verify.stderr
    audit = _cli(served, "log", "audit", f"{server.url}/log", "--log-key", served.vkey)
    assert audit.returncode == 1 and audit.stderr.count("\u2014 grader-log/tlog-comp ") == 2, audit.stderr


def test_a_deliberate_rewind_is_signed_logged_and_seen_as_a_fork(served: Served) -> None:
    server, url = served.server, f"{served.server.url}/log"
    newest = served.root / "newest.checkpoint"
    newest.write_bytes(httpx.get(f"{url}/checkpoint").content)
    server.stop()
    _copy_database(served.root / "older.sqlite3", server.state / "grader.sqlite3")  # the disaster: only an older copy is left
    refused = server.start(expect_ok=False)
    assert refused.process is not None and refused.process.wait(120) != 0
    said = admin(server.state, "log-rewind", "--checkpoint", str(newest), "--admin", "host", "--reason", "disk lost; nightly copy restored")
    statement = said.split("\n", 1)[1].encode()
    assert open_note(statement, [NoteVerifier.from_vkey(served.vkey)]).text.startswith("grader-log rewind v1\ngrader-log/tlog-comp\npublished ")
    server.start()
    fresh = grader_cli("log", "audit", url, "--log-key", served.vkey, env={"XDG_STATE_HOME": str(served.root / "another-user")})
    assert fresh.returncode == 0 and "rewind 1" in fresh.stdout, fresh.stderr
    since = _cli(served, "log", "audit", url, "--log-key", served.vkey, "--since", str(newest))
    assert since.returncode == 1 and since.stderr.count("\u2014 grader-log/tlog-comp ") == 2, since.stderr


def test_a_report_deleted_with_its_entry_and_the_tree_re_signed_is_caught_from_the_report_alone(served: Served) -> None:
    """The host deletes a graded report (its result row, its files) and, to hide it, its log entry, and signs the new
    tree afresh. Its participant kept nothing but the report and its proof (no checkpoint seen before): that is enough."""
    server = served.server
    proof = f"{served.report}.tlog-proof"
    before = grader_cli(  # the log as it stands (after the rewind above) still extends the report's checkpoint
        "verify",
        str(served.report),
        "--key",
        str(served.public_key),
        "--log-key",
        served.vkey,
        "--log",
        f"{server.url}/log",
        env={"XDG_STATE_HOME": str(served.root / "before-deletion")},
    )
    assert before.returncode == 0, before.stderr
    server.stop()
    db = open_database(server.state)
    with db.engine.begin() as connection:
        dropped = connection.execute(
            text("SELECT idx FROM log_entries WHERE kind = 'report' AND submission_id = :s"), {"s": served.submission_id}
        ).scalar_one()
        connection.execute(text("DELETE FROM log_entries WHERE idx = :i"), {"i": dropped})
        connection.execute(text("UPDATE log_entries SET idx = -idx WHERE idx > :i"), {"i": dropped})
        connection.execute(text("UPDATE log_entries SET idx = -idx - 1 WHERE idx < 0"))
        connection.execute(text("DELETE FROM results WHERE submission_id = :s"), {"s": served.submission_id})
        connection.execute(text("UPDATE submissions SET state = 'queued', result_id = NULL WHERE id = :s"), {"s": served.submission_id})
    db.dispose()
    shutil.rmtree(server.state / "results" / served.submission_id, ignore_errors=True)
    (server.state / "log" / "checkpoint").unlink()
    server.start()
    assert HostingClient(server.url, served.token).status(served.submission_id)["state"] == "queued"  # as if never graded
    holder = {"XDG_STATE_HOME": str(served.root / "report-holder")}
    url = f"{server.url}/log"
    verify = grader_cli("verify", str(served.report), "--key", str(served.public_key), "--log-key", served.vkey, "--log", url, env=holder)
    assert verify.returncode == 1 and verify.stdout == "", verify.stdout + verify.stderr
    assert verify.stderr.count("\u2014 grader-log/tlog-comp ") == 2, verify.stderr
    audit = grader_cli("log", "audit", url, "--log-key", served.vkey, "--since", proof, env={"XDG_STATE_HOME": str(served.root / "auditor")})
    assert audit.returncode == 1 and audit.stderr.count("\u2014 grader-log/tlog-comp ") == 2, audit.stderr
