"""``grader verify`` of a signed lint report (``grader lint --out --key``): accepted and called what it is; tampering refused.

The lint report is made by ``grader lint`` on a four-document task with one planted exact copy; what
``verify`` prints is held to the file ``--out`` wrote and to the key's id, and every tampered form is
refused with the same words ``grader verify`` uses for a grading report.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from grader.integrity.signing import PREDICATE_TYPE, lint_statement
from grader.reports.dsse import envelope_json, sign_payload
from grader.reports.keys import keyid, load_private_key, load_public_key, write_keypair
from grader.reports.statement import PAYLOAD_TYPE, canonical_bytes
from tests.cli_support import invoke
from tests.conftest import write_task


@pytest.fixture
def linted(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """(lint.json, lint.dsse.json, private key, public key) of a task whose d1 and d3 are equal texts."""
    corpus = [
        {"_id": f"d{n}", "title": "", "text": text} for n, text in enumerate(["def f(x): return x + 1", "hello", "def f(x): return x + 1", "bye"], 1)
    ]
    queries = [{"_id": "q1", "text": "add one"}, {"_id": "q2", "text": "greet"}]
    write_task(tmp_path / "bench" / "t", corpus=corpus, queries=queries, qrels={"test": [("q1", "d1", 1), ("q2", "d2", 1)]})
    (tmp_path / "bench" / "benchmark.json").write_text(
        '{"name": "b", "version": "1", "primary_measure": "NDCG@10", "tasks": ["t"]}', encoding="utf-8"
    )
    private, public = write_keypair(tmp_path / "keys")
    invoke("lint", tmp_path / "bench", "--out", tmp_path / "lint.json", "--key", private)
    return tmp_path / "lint.json", tmp_path / "lint.dsse.json", private, public


def test_verify_accepts_a_lint_report_and_says_it_is_one(linted: tuple[Path, Path, Path, Path]) -> None:
    plain, envelope, _, public = linted
    written = json.loads(plain.read_text(encoding="utf-8"))
    raw = load_public_key(public).public_bytes(Encoding.Raw, PublicFormat.Raw)
    lines = invoke("verify", envelope, "--key", public).stdout.splitlines()
    assert lines[:3] == [
        f"verified: signed by key {hashlib.sha256(raw).hexdigest()}",
        f"kind: a lint report ({PREDICATE_TYPE}): findings about the data, not a grade",
        f"subject: b (linted data) sha256:{written['subject']['digest']['sha256']}",
    ]
    # The planted copy: one exact-duplicate group touching q1, one of the two test queries.
    assert any(line.split() == ["t", "exact_duplicate_documents", "1", "1/2", "50.0%"] for line in lines)
    assert json.loads(invoke("verify", envelope, "--key", public, "--json").stdout) == written


def test_tampered_or_foreign_lint_envelopes_are_refused(linted: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    _, envelope, private, public = linted
    data = json.loads(envelope.read_text(encoding="utf-8"))
    payload = bytearray(base64.b64decode(data["payload"]))
    payload[payload.index(b'"count":1') + 8] = ord("2")  # the duplicate group counted twice
    forged = tmp_path / "forged.dsse.json"
    forged.write_text(json.dumps({**data, "payload": base64.b64encode(bytes(payload)).decode()}), encoding="utf-8")
    assert invoke("verify", forged, "--key", public, expect=1).stderr == f"error: {forged}: bad signature\n"
    _other, other_public = write_keypair(tmp_path / "other")
    refused = invoke("verify", envelope, "--key", other_public, expect=1).stderr
    assert refused.startswith(f"error: {envelope}: key mismatch: envelope keyid ") and keyid(load_public_key(other_public)) in refused
    # Signed by the right key but not a valid lint report: checked whole after the dispatch.
    report = json.loads(linted[0].read_text(encoding="utf-8"))
    report["tasks"][0]["findings"]["exact_duplicate_documents"]["count"] = -1
    key = load_private_key(private)
    bad = sign_payload(PAYLOAD_TYPE, canonical_bytes(lint_statement(report)), key, keyid(key.public_key()))
    invalid = tmp_path / "invalid.dsse.json"
    invalid.write_bytes(envelope_json(bad))
    assert invoke("verify", invalid, "--key", public, expect=1).stderr.startswith(f"error: {invalid}: schema violation at /tasks/0/findings/")
    assert "transparency log" in invoke("verify", envelope, "--key", public, "--log-key", "k", expect=2).stderr
