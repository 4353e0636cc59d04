"""``grader reproduce REPORT SUBMISSION``: a signed report graded again and compared, the first difference named.

One signed in-process grade of the example encoder on ``mini`` (module fixture) is reproduced as it is
(exit 0), against edited data (the data digest is named, before anything is graded), and as reports
re-signed with one field changed (grader version; a sandbox image or CPU fingerprint in the comparison).
A tiny lookup-table model whose one query's word is moved to another document names that task and query.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import grader
from grader.reports.keys import load_public_key
from grader.reports.signing import write_signed_report
from grader.reports.verify import verify_report_file
from grader.reproduce.compare import OTHER_KEY, grade_difference
from tests.cli_support import invoke
from tests.conftest import write_task
from tests.onnx_models import WORDS, embedding_table, onnx_submission

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
MINI = REPO / "grader" / "bundled" / "mini"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("keys")
    invoke("keygen", "--out", folder)
    return folder


@pytest.fixture(scope="module")
def signed(keys: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A signed grade of the example encoder on mini: in-process, one thread (fixed embeddings)."""
    out = tmp_path_factory.mktemp("grade")
    invoke("run", EXAMPLE, "--benchmark", "mini", "--sandbox", "none", "--threads", "1", "--quiet", "--out", out, "--key", keys / "grader.key")
    return out / "report.dsse.json"


def _resigned(signed: Path, keys: Path, folder: Path, change) -> Path:
    """``signed``'s report with ``change`` applied, signed again with the same key (a valid report saying something else)."""
    report = copy.deepcopy(verify_report_file(signed, load_public_key(keys / "grader.pub")).report)
    change(report)
    envelope, _ = write_signed_report(report, keys / "grader.key", folder / "changed.dsse.json")
    return envelope


@pytest.mark.slow
def test_a_faithful_regrade_reproduces(signed: Path, keys: Path, tmp_path: Path) -> None:
    result = invoke("reproduce", signed, EXAMPLE, "--key", keys / "grader.pub", "--quiet", "--out", tmp_path / "again")
    assert result.stdout.startswith(f"reproduced: {signed}: 3 task(s), every run digest, status and measure equal\n")
    again = json.loads((tmp_path / "again" / "report.json").read_text(encoding="utf-8"))
    original = verify_report_file(signed, load_public_key(keys / "grader.pub")).report
    assert {n: t["run_digest"] for n, t in again["tasks"].items()} == {n: t["run_digest"] for n, t in original["tasks"].items()}


@pytest.mark.slow
def test_changed_data_is_named_first_and_nothing_is_graded(signed: Path, keys: Path, tmp_path: Path) -> None:
    data = tmp_path / "mini"
    shutil.copytree(MINI, data)
    qrels = data / "code2text" / "qrels" / "test.tsv"
    lines = qrels.read_text(encoding="utf-8").splitlines(keepends=True)
    qrels.write_text("".join(lines[:-1]), encoding="utf-8")  # one judgement fewer
    # A different version as well: the data is named first all the same.
    changed = _resigned(signed, keys, tmp_path, lambda r: r["grader"].update(version="0.0.1"))
    result = invoke("reproduce", changed, EXAMPLE, "--key", keys / "grader.pub", "--benchmark", data, "--out", tmp_path / "out", expect=1)
    assert result.stderr.startswith(f"error: {changed}: not reproduced: data digest: task code2text (test): sha256:")
    assert not (tmp_path / "out").exists()  # nothing was graded


@pytest.mark.slow
def test_another_grader_version_is_named(signed: Path, keys: Path, tmp_path: Path) -> None:
    changed = _resigned(signed, keys, tmp_path, lambda r: r["grader"].update(version="0.0.1"))
    result = invoke("reproduce", changed, EXAMPLE, "--key", keys / "grader.pub", expect=1)
    assert f"not reproduced: grader version: '0.0.1' in the report, {grader.__version__!r} here" in result.stderr


@pytest.mark.slow
def test_a_tampered_report_is_refused_as_verify_refuses_it(signed: Path, keys: Path, tmp_path: Path) -> None:
    envelope = json.loads(signed.read_text(encoding="utf-8"))
    envelope["signatures"][0]["sig"] = envelope["signatures"][0]["sig"][::-1]
    tampered = tmp_path / "tampered.dsse.json"
    tampered.write_text(json.dumps(envelope), encoding="utf-8")
    verified = invoke("verify", tampered, "--key", keys / "grader.pub", expect=1)
    reproduced = invoke("reproduce", tampered, EXAMPLE, "--key", keys / "grader.pub", expect=1)
    assert reproduced.stderr == verified.stderr != ""


@pytest.mark.slow
def test_the_image_and_the_fingerprint_are_compared_before_the_tasks(signed: Path, keys: Path) -> None:
    report = verify_report_file(signed, load_public_key(keys / "grader.pub")).report
    regraded = copy.deepcopy(report)
    regraded["tasks"]["text2code"]["run_digest"]["sha256"] = "0" * 64  # a task differs too: named after both
    docker = {"kind": "docker", "image": "sha256:" + "a" * 64}
    first = grade_difference({**report, "sandbox": docker}, {**regraded, "sandbox": {**docker, "image": "sha256:" + "b" * 64}}, None)
    assert first is not None and (first.kind, first.detail) == (
        "sandbox image",
        f"docker 'sha256:{'a' * 64}' in the report, docker 'sha256:{'b' * 64}' re-graded",
    )
    stated = {"machine": "x86_64", "isa": ["avx2"], "cpu_flags_sha256": "1" * 64}
    here = {**stated, "isa": ["avx2", "avx512f"]}
    labelled = {**report, "labels": {**report["labels"], "fingerprint": stated}}
    second = grade_difference(labelled, regraded, here)
    assert second is not None and (second.kind, second.detail) == ("CPU fingerprint", "the report's worker and this machine differ in isa")
    assert grade_difference(labelled, copy.deepcopy(report), stated) is None
    third = grade_difference(report, regraded, None)
    assert third is not None and third.kind == "task" and third.detail.startswith("text2code: run digest")
    assert third.detail.endswith("re-graded (no query's per-query value differs)")
    # Staged under another blinding key: the difference says why a run can differ with no query's value.
    keyed = {**docker, "blinding": {"scheme": "hmac-sha256-96/v1", "key_id": "c" * 64}}
    other = {**keyed, "blinding": {"scheme": "hmac-sha256-96/v1", "key_id": "d" * 64}}
    fourth = grade_difference({**report, "sandbox": keyed}, {**regraded, "sandbox": other}, None)
    assert fourth is not None and fourth.detail.endswith(f"(no query's per-query value differs{OTHER_KEY})")


def _tiny(root: Path) -> Path:
    corpus = [{"_id": f"d{n}", "title": "", "text": word} for n, word in enumerate(["w11", "w20", "w31", "w40"], start=1)]
    queries = [{"_id": "qa", "text": "w10"}, {"_id": "qb", "text": "w20 w40"}]
    write_task(root / "t", corpus=corpus, queries=queries, qrels={"test": [("qa", "d1", 1), ("qb", "d2", 1)]})
    spec = {"name": "tiny", "version": "1", "primary_measure": "NDCG@10", "measures": ["NDCG@10"], "tasks": ["t"]}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


@pytest.mark.slow
def test_a_submission_that_ranks_one_query_otherwise_names_the_task_and_the_query(keys: Path, tmp_path: Path) -> None:
    bench = _tiny(tmp_path / "tiny")
    table = embedding_table(dim=8, seed=11)
    table[WORDS.index("w10")] = table[WORDS.index("w11")]  # qa reads as d1's word: d1 first
    original = onnx_submission(tmp_path / "original", table=table)
    moved = table.copy()
    moved[WORDS.index("w10")] = 50 * table[WORDS.index("w31")]  # qa now reads as d3's word: d3 first; qb unchanged
    changed = onnx_submission(tmp_path / "changed", table=np.ascontiguousarray(moved))
    out = tmp_path / "grade"
    invoke("run", original, "--benchmark", bench, "--sandbox", "none", "--threads", "1", "--quiet", "--out", out, "--key", keys / "grader.key")
    signed = out / "report.dsse.json"
    invoke("reproduce", signed, original, "--key", keys / "grader.pub", "--benchmark", bench, "--quiet")
    result = invoke("reproduce", signed, changed, "--key", keys / "grader.pub", "--benchmark", bench, "--quiet", expect=1)
    assert "not reproduced: query: task t query 'qa': the ranking differs (run digest sha256:" in result.stderr
    # Independently: qa is now v31's direction; d1 (v11) falls behind d3 and every document nearer to v31.
    unit = {w: table[WORDS.index(w)] / np.linalg.norm(table[WORDS.index(w)]) for w in ("w11", "w20", "w31", "w40")}
    rank = 1 + sum(float(unit["w31"] @ unit[w]) > float(unit["w31"] @ unit["w11"]) for w in ("w20", "w31", "w40"))
    assert rank > 1
    assert result.stderr.rstrip().endswith(f"NDCG@10 1 in the report, {float(1 / np.log2(rank + 1))!r} re-graded")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda r: [r.update(schema_version="1"), *(t.pop("run_digest") for t in r["tasks"].values())], "task code2code carries no run digest"),
        (lambda r: r["labels"].update(part={"name": "public"}), "the report scores part of the queries (labels.part"),
        (lambda r: r.update(sandbox=None), "the report graded a run file (grader score)"),
    ],
)
def test_reports_that_cannot_be_reproduced_are_refused_before_anything_runs(signed: Path, keys: Path, tmp_path: Path, change, words: str) -> None:
    changed = _resigned(signed, keys, tmp_path, change)
    result = invoke("reproduce", changed, EXAMPLE, "--key", keys / "grader.pub", "--out", tmp_path / "out", expect=2)
    assert result.stderr.startswith(f"error: {changed}: cannot reproduce: {words}")
    assert not (tmp_path / "out").exists()
