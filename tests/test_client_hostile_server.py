"""The participant's commands against a hostile server (issue 32, item 6): escapes, huge and endless answers, trickles,
a log claiming 2**32 entries, and the receipt file ``grader submit --receipt`` writes.

Every test but the last two runs the real ``grader`` command in-process against :class:`tests.hostile_server.HostileServer`,
a server on a real socket that counts what it sent. ``color=True``: click strips nothing, as on a terminal.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.cli.main import cli
from grader.hosting.participant.competition_rules import MAX_ANSWER_BYTES
from grader.hosting.participant.fetch import MAX_JSON_ANSWER, Fetcher, FetchLimits
from grader.transparency.checkpoint import Checkpoint, sign_checkpoint
from grader.transparency.commitments import EntryCommitter, new_identifier_key
from grader.transparency.entries import end_entry, receipt_entry
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import MemoryTree, inclusion_proof, leaf_hash
from grader.transparency.mirror import write_log_folder
from grader.transparency.note import NoteSigner
from grader.transparency.proof import TlogProof
from grader.transparency.tiles import TILE_WIDTH, entry_bundle
from tests.hostile_server import HOSTILE, Answer, HostileServer, elapsed, endless, raw_controls, trickle

REPO = Path(__file__).resolve().parent.parent
ORIGIN = "grader.example/hostile"
SIGNER = NoteSigner(ORIGIN, Ed25519PrivateKey.generate())
VKEY = SIGNER.verifier.vkey
TIME = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TEXT = {"Content-Type": "text/plain"}
#: What the kernel's socket buffers may hold past what a client read (send and receive sides of a loopback connection).
SOCKET_SLACK = 32 << 20


def run(*args: object, env: dict[str, str] | None = None) -> Result:
    """``grader ARGS`` in-process, stdout and stderr apart, escapes left in (as a terminal gets them)."""
    return CliRunner().invoke(cli, [str(arg) for arg in args], env=env, color=True)


def one_error_line(result: Result) -> str:
    """The one ``error:`` line of a failed command (a ``hint:`` line may follow it); no traceback, nothing else."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) in (1, 2) and lines[0].startswith("error: ") and all(line.startswith("hint: ") for line in lines[1:]), result.stderr
    return lines[0]


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileServer]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # an audit saves the checkpoints it saw
    with HostileServer() as hostile:
        yield hostile


def _peak(call: object) -> tuple[Result, int]:
    """``call()``'s result and the peak of the Python memory it allocated (threads included)."""
    tracemalloc.start()
    try:
        result = call()  # type: ignore[operator]
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- (a) escapes


@pytest.mark.slow
def test_status_logs_submissions_quota_and_finals_show_every_server_string_escaped(server: HostileServer) -> None:
    view = {key: f"{key} {HOSTILE}" for key in ("id", "state", "failure_code", "last_log_line", "track", "uploaded_at", "name")}
    server.route("/api/v1/submissions/s1", view)
    server.route("/api/v1/submissions/s1/logs", {"logs": {f"task {HOSTILE}": f"first {HOSTILE}\nsecond \x9b2J\tend\r\nthird"}})
    server.route("/api/v1/submissions", [view])
    server.route("/api/v1/quota", {"hidden": {"used_24h": HOSTILE, "per_day": 3, "in_flight": 0, "concurrent": 1, "next_possible_at": HOSTILE}})
    server.route("/api/v1/finals", {"finals": [HOSTILE], "limit": HOSTILE, "chosen": True})
    for command in (("status", "s1", "--logs"), ("submissions",), ("quota",), ("finals",)):
        result = run(*command, "--server", server.url, "--token", "t")
        assert result.exit_code == 0, (command, result.output, result.exception)
        assert raw_controls(result.output) == [], (command, result.output)
        assert "\\x1b]52;c;" in result.output and "\\x9b31m" in result.output and "\\x1b[2J" in result.output, (command, result.output)
    logs = run("status", "s1", "--logs", "--server", server.url, "--token", "t").stdout.splitlines()
    # the logs escaped line by line: each of the container's lines stays a line, its controls shown
    assert logs[1].startswith("first \\x1b]52;c;") and logs[2] == "second \\x9b2J\\tend\\r" and logs[3] == "third", logs


# --------------------------------------------------------------------------- (b) huge answers, bad JSON


@pytest.mark.slow
def test_a_600_mb_answer_is_read_no_further_than_the_cap_and_ends_in_one_line(server: HostileServer) -> None:
    server.route("/api/v1/submissions/s1", Answer(endless(b'{"id": "')))
    server.route("/api/v1/competition", Answer(endless(b'{"name": "')))
    run("status", "--help")
    run("check", "--help")  # the commands' imports, before the memory is measured
    result, peak = _peak(lambda: run("status", "s1", "--server", server.url, "--token", "t"))
    assert result.exit_code == 5 and f"larger than the {MAX_JSON_ANSWER} bytes" in one_error_line(result)
    assert server.sent["/api/v1/submissions/s1"] < MAX_JSON_ANSWER + SOCKET_SLACK  # of the 600 MB it offered
    assert peak < 3 * MAX_JSON_ANSWER, peak  # 1.3 GB before
    result, peak = _peak(lambda: run("check", "nowhere", "--competition", server.url))
    assert result.exit_code == 5 and f"larger than the {MAX_ANSWER_BYTES} bytes" in one_error_line(result)
    assert server.sent["/api/v1/competition"] < MAX_ANSWER_BYTES + SOCKET_SLACK  # 1.28 GB read before its 1 MiB cap
    assert peak < 16 * MAX_ANSWER_BYTES, peak


@pytest.mark.slow
def test_a_declared_huge_length_bad_json_or_a_wrong_shape_is_one_line(server: HostileServer) -> None:
    server.route("/api/v1/submissions/big", Answer(endless(b"{"), headers={"Content-Length": str(600 << 20)}))
    server.route("/api/v1/submissions/cut", b'{"id": "s1", "state": ')
    server.route("/api/v1/submissions/list", [])
    server.route("/api/v1/submissions", [{"id": 1}])
    cases = {
        ("status", "big"): "an answer of 629145600 bytes, more than",
        ("status", "cut"): "the answer is not JSON",
        ("status", "list"): "not a JSON object",
        ("submissions",): "not a submission",
    }
    for command, words in cases.items():
        result = run(*command, "--server", server.url, "--token", "t")
        assert result.exit_code == 5 and words in one_error_line(result), (command, result.stderr)
    assert server.sent["/api/v1/submissions/big"] < SOCKET_SLACK  # refused on its Content-Length


# --------------------------------------------------------------------------- (c) trickles and deadlines


@pytest.mark.slow
def test_a_trickled_checkpoint_ends_the_audit_by_the_fetch_deadline(server: HostileServer) -> None:
    server.route("/log/checkpoint", Answer(trickle(b"grader.example/hostile\n"), pause_s=0.2, headers=TEXT))
    started = time.monotonic()
    result = run("log", "audit", f"{server.url}/log", "--log-key", VKEY, env={"GRADER_FETCH_DEADLINE_S": "1"})
    assert elapsed(started) < 3
    assert result.exit_code == 1 and "no whole answer within the fetch deadline (1 s, GRADER_FETCH_DEADLINE_S)" in one_error_line(result)


@pytest.mark.slow
def test_trickled_headers_end_the_command_by_its_deadline(server: HostileServer) -> None:
    # the HTTP library reads a status line and headers without giving control back: only the fetch's thread bounds them
    server.route("/api/v1/submissions/s1", Answer(b"{}", pause_s=0.1, trickle_head=True))
    server.route("/log/checkpoint", Answer(trickle(b"x"), pause_s=0.2, headers=TEXT))
    env = {"GRADER_FETCH_DEADLINE_S": "100", "GRADER_COMMAND_DEADLINE_S": "1"}
    for command, status in (
        (("status", "s1", "--server", server.url, "--token", "t"), 5),
        (("log", "audit", f"{server.url}/log", "--log-key", VKEY), 1),
    ):
        started = time.monotonic()
        result = run(*command, env=env)
        assert elapsed(started) < 3
        assert result.exit_code == status and "the command's deadline (1 s, GRADER_COMMAND_DEADLINE_S)" in one_error_line(result)


@pytest.mark.slow
def test_an_answer_slower_than_the_minimum_rate_ends_after_its_grace(server: HostileServer) -> None:
    server.route("/slow", Answer(trickle(b"0123456789"), pause_s=0.02, headers=TEXT))  # ~50 bytes/s, for ever
    fetcher = Fetcher(LogVerificationError, limits=FetchLimits(fetch_s=60, min_rate=1000, grace_s=0.5, command_s=60))
    started = time.monotonic()
    with pytest.raises(LogVerificationError, match=r"slower than 1000 bytes/s .* GRADER_FETCH_MIN_RATE"):
        fetcher.fetch("GET", f"{server.url}/slow", max_bytes=1 << 20)
    assert elapsed(started) < 2


def test_a_bad_bound_in_the_environment_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("soon", "-1", "0", "nan"):
        monkeypatch.setenv("GRADER_FETCH_DEADLINE_S", value)
        result = run("status", "s1", "--server", "http://127.0.0.1:9", "--token", "t")
        assert result.exit_code == 2 and "GRADER_FETCH_DEADLINE_S" in one_error_line(result), (value, result.stderr)


# --------------------------------------------------------------------------- (d) the audit of a huge or junk log


@pytest.mark.slow
def test_the_audit_refuses_a_log_claiming_2_32_entries_before_reading_a_tile(server: HostileServer) -> None:
    server.route("/log/checkpoint", Answer(sign_checkpoint(Checkpoint(ORIGIN, 2**32, b"\0" * 32), SIGNER), headers=TEXT))
    run("log", "--help")
    result, peak = _peak(lambda: run("log", "audit", f"{server.url}/log", "--log-key", VKEY))
    assert result.exit_code == 1 and "claims 4294967296 entries, more than the 1000000 this audit reads" in one_error_line(result)
    assert server.asked == ["/log/checkpoint"] and peak < 4 << 20, (server.asked, peak)  # 2.6 GB of tile list before
    # allowed that many, it reads the first bundle, finds it does not match its tile, and stops there (tile lists are lazy)
    server.route("/log/tile/0/000", Answer(b"\1" * 32 * TILE_WIDTH, headers=TEXT))
    server.route("/log/tile/entries/000", Answer(entry_bundle([b"x" * 0xFFFF] * TILE_WIDTH), headers=TEXT))
    result, peak = _peak(lambda: run("log", "audit", f"{server.url}/log", "--log-key", VKEY, "--max-entries", 2**33))
    assert result.exit_code == 1 and "tile/entries/000: the entries do not match tile/0/000" in one_error_line(result)
    assert server.asked[1:] == ["/log/checkpoint", "/log/tile/0/000", "/log/tile/entries/000"]  # 503 MB downloaded before
    assert peak < 96 << 20, peak  # one bundle (16.8 MB) in its forms, not the log


def test_the_audit_refuses_more_entries_or_bytes_than_its_bounds(tmp_path: Path) -> None:
    entries = [end_entry(time=TIME)] * 300
    write_log_folder(tmp_path, entries, sign_checkpoint(Checkpoint(ORIGIN, 300, MemoryTree.from_entries(entries).root()), SIGNER))
    for bound, words in ((("--max-entries", 299), "claims 300 entries, more than the 299"), (("--max-bytes", 1000), "pass 1000 bytes by entry 255")):
        result = run("log", "audit", tmp_path, "--log-key", VKEY, *bound)
        assert result.exit_code == 1 and words in one_error_line(result), result.stderr


# --------------------------------------------------------------------------- (e) the receipt file, as written


def _receipt() -> dict[str, object]:
    """What a server's upload answer carries: the receipt entry (index 3 of a log of five), its key, leaf hash and proof."""
    receipt = receipt_entry(EntryCommitter.fresh(new_identifier_key()), time=TIME, participant="p1", submission="s1", upload_sha256="ab" * 32)
    entries = [end_entry(time=TIME)] * 3 + [receipt, end_entry(time=TIME)]
    tree = MemoryTree.from_entries(entries)
    note = sign_checkpoint(Checkpoint(ORIGIN, 5, tree.root()), SIGNER)
    proof = TlogProof(3, tuple(inclusion_proof(tree, 3, 5)), note).to_bytes().decode()
    return {"index": 3, "entry": receipt.decode(), "entry_key": "cd" * 32, "leaf_hash": leaf_hash(receipt).hex(), "proof": proof}


@pytest.mark.slow
def test_verify_proof_accepts_the_receipt_file_submit_writes(server: HostileServer, tmp_path: Path) -> None:
    competition = {
        "name": "hostile",
        "benchmark": "mini",
        "tasks": None,
        "kinds": ["onnx", "docker"],
        "require_training_labels": False,
        "upload_max_bytes": 100 << 20,
        "limits": {},
        "start": "2020-01-01T00:00:00+00:00",
        "end": "2999-01-01T00:00:00+00:00",
    }
    server.route("/api/v1/competition", competition)
    server.route("/api/v1/quota", {"hidden": {"used_24h": 0, "per_day": 5, "in_flight": 0, "concurrent": 2}})
    server.route("/api/v1/submissions", {"id": "s1", "state": "queued", "receipt": _receipt()})
    saved = tmp_path / "receipt.json"
    result = run("submit", REPO / "submissions_example" / "onnx-lsa", "--server", server.url, "--token", "t", "--receipt", saved)
    assert result.exit_code == 0 and result.stdout == "s1\n", (result.output, result.exception)
    checked = run("log", "verify-proof", f"{saved}.tlog-proof", "--entry", saved, "--log-key", VKEY)
    assert checked.exit_code == 0, checked.output  # "unknown entry kind 'None'" before
    assert checked.stdout.startswith(f"verified: receipt entry 3 is in log {ORIGIN} (tree size 5, root ")
    # the receipt's own claims are checked too: its index against the proof's, its leaf hash against its entry
    text = saved.read_text()
    for wrong, words in (
        (text.replace('"index": 3', '"index": 2'), "the receipt is of entry 2, the proof of entry 3"),
        (text.replace('"leaf_hash": "', '"leaf_hash": "00'), "leaf_hash is not the hash"),
    ):
        saved.write_text(wrong)
        result = run("log", "verify-proof", f"{saved}.tlog-proof", "--entry", saved, "--log-key", VKEY)
        assert result.exit_code == 1 and words in one_error_line(result), result.stderr
    assert os.path.getsize(f"{saved}.tlog-proof") > 0
