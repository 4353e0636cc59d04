"""Untrusted-input failures of the old code that need no container; each test fails on the grader before these checks.

Imports only what existed before, so the same file runs against the old code.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from onnx import TensorProto, helper

from grader.cli.main import cli
from grader.errors import RunFormatError, SubmissionError, VerificationError
from grader.reports.dsse import envelope_json
from grader.reports.example import example_report
from grader.reports.keys import keyid
from grader.reports.signing import sign_report
from grader.reports.verify import verify_envelope
from grader.runs.readers import read_run
from grader.submissions.manifest import load_manifest
from grader.submissions.onnx_intake import inspect_onnx_model
from tests.onnx_models import onnx_submission

DEEP = 200_000
#: grader.submissions.manifest.MAX_TOKENIZER_BYTES, written out so this file imports on the old code
TOKENIZER_LIMIT = 64 << 20


# --------------------------------------------------------------------------- runs read by grader score


def _score(tmp_path: Path, run: Path) -> object:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    return CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(run)])


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("deep.jsonl", '{"query_id": "q1", "hits": ' + "[" * DEEP + "]" * DEEP + "}\n"),
        ("deep-score.jsonl", '{"query_id": "q1", "hits": [{"id": "d1", "score": ' + "[" * DEEP + "]" * DEEP + "}]}\n"),
        ("deep-ok-parse.jsonl", '{"query_id": "q1", "hits": [{"id": "d1", "score": ' + "[" * 900 + "]" * 900 + "}]}\n"),
        ("deep.json", '{"q1": ' + "[" * DEEP + "]" * DEEP + "}"),
    ],
)
def test_a_deeply_nested_run_is_one_error_line(tmp_path: Path, name: str, content: str) -> None:
    run = tmp_path / name
    run.write_text(content, encoding="utf-8")
    result = _score(tmp_path, run)
    assert result.exit_code == 2, result.exception  # today: RecursionError, exit 1
    assert result.stderr.startswith(f"error: {run}") and "nested" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_huge_query_id_is_quoted_short(tmp_path: Path) -> None:
    run = tmp_path / "huge.jsonl"
    huge = "\x1b[2J" + "Q" * 3_000_000
    line = json.dumps({"query_id": huge, "hits": []})
    run.write_text(line + "\n" + line + "\n", encoding="utf-8")
    result = _score(tmp_path, run)
    assert result.exit_code == 2
    assert ":2: /query_id: query '\\x1b[2JQQQ" in result.stderr
    assert len(result.stderr) < 2100 and "\x1b" not in result.stderr
    with pytest.raises(RunFormatError) as caught:
        read_run(run)
    assert len(str(caught.value)) < 2100


# --------------------------------------------------------------------------- signed reports


def test_an_envelope_with_a_duplicate_payload_key_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    envelope = sign_report(example_report(), key)
    forged_payload = base64.b64encode(b'{"forged": true}').decode("ascii")
    real = envelope_json(envelope).decode("utf-8")
    # A first-key-wins reader sees the forged payload; Python's json (last key wins) saw the signed one.
    doubled = real.replace('"payload": ', f'"payload": "{forged_payload}",\n  "payload": ', 1).encode("utf-8")
    assert json.loads(doubled)["payload"] == envelope["payload"]
    with pytest.raises(VerificationError, match="key 'payload' appears twice"):
        verify_envelope(doubled, key.public_key())
    assert verify_envelope(envelope_json(envelope), key.public_key()).keyid == keyid(key.public_key())


# --------------------------------------------------------------------------- submissions


def test_an_oversized_tokenizer_is_refused_with_its_limit(tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "sub")
    tokenizer = folder / "tokenizer.json"
    with open(tokenizer, "r+b") as handle:  # sparse: no 64 MiB written
        handle.truncate(TOKENIZER_LIMIT + 1)
    with pytest.raises(SubmissionError) as caught:
        load_manifest(folder)
    message = str(caught.value)
    assert message.startswith(str(folder / "submission.json")) and "/tokenizer" in message
    assert f"over the {TOKENIZER_LIMIT}-byte (64 MiB) limit" in message


@pytest.mark.parametrize("location", ["/etc/hostname", "../outside.bin", "missing.bin"])
def test_external_data_inside_model_functions_is_checked(tmp_path: Path, location: str) -> None:
    folder = onnx_submission(tmp_path / "sub")
    model_path = folder / "model.onnx"
    model = onnx.load(str(model_path))
    tensor = TensorProto(name="leak", data_type=TensorProto.UINT8, dims=[8], data_location=TensorProto.EXTERNAL)
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    constant = helper.make_node("Constant", [], ["y"], value=tensor)
    function = helper.make_function("local", "Leak", [], ["y"], [constant], [helper.make_opsetid("", 17)])
    model.functions.append(function)
    onnx.save(model, str(model_path))
    manifest = load_manifest(folder)
    with pytest.raises(SubmissionError, match="external data") as caught:
        inspect_onnx_model(folder, manifest)
    assert "leak" in str(caught.value)
    assert os.path.exists(model_path)


# --------------------------------------------------------------------------- progress lines


@pytest.mark.slow
def test_the_resumed_line_shows_the_primary_measure(tmp_path: Path) -> None:
    from tests.sandbox_support import write_benchmark

    bench = write_benchmark(tmp_path / "bench", ["alpha"], measures=("MAP@1", "MRR@10", "NDCG@10"))
    submission = onnx_submission(tmp_path / "sub")
    out = tmp_path / "out"
    lines = []
    for _ in range(2):
        result = CliRunner().invoke(
            cli, ["run", str(submission), "--benchmark", str(bench), "--out", str(out), "--threads", "1", "--sandbox", "none"]
        )
        assert result.exit_code == 0, (result.stderr, result.exception)
        lines.append(next(line for line in result.stderr.splitlines() if line.startswith("alpha: scored")))
    assert lines[0].startswith("alpha: scored NDCG@10 = ")
    assert lines[1].startswith("alpha: scored NDCG@10 = ") and lines[1].endswith("(stored result, resumed)")  # was MAP@1, the first name sorted
