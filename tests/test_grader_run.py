"""End to end: ``grader run`` on a tiny benchmark written here, with a real ONNX model.

The expected measures are computed independently: embeddings with numpy from the
lookup table, exact search with numpy, measures with pytrec_eval (MRR@10 by hand).
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
from click.testing import CliRunner

from grader.cli.main import cli
from grader.reports import validate_report
from grader.submissions.digest import submission_digest
from tests.conftest import write_task
from tests.onnx_models import WORDS, embedding_table, expected_embeddings, onnx_submission, words

TABLE = embedding_table(dim=8, seed=5)
MEASURES = ["NDCG@10", "MRR@10", "Recall@3", "P@1", "MAP@100"]
QUERY_PREFIX = "w7 "
DOCUMENT_PREFIX = "w8 "


TASKS = {
    "alpha": {
        "corpus": [
            {"_id": "a1", "title": words(10), "text": words(11, 12, 13)},
            {"_id": "a2", "title": "", "text": words(14, 15, 16, 17)},
            {"_id": "a3", "title": words(18, 19), "text": words(20, 21)},
            {"_id": "a4", "title": "", "text": words(22, 23, 10)},
            {"_id": "a5", "title": "", "text": words(7, 7, 7, 24)},
            {"_id": "a6", "title": "", "text": words(*range(25, 45))},  # longer than max_length: truncated
        ],
        "queries": [
            {"_id": "qa1", "text": words(11, 12)},
            {"_id": "qa2", "text": words(15, 16, 30)},
            {"_id": "qa3", "text": words(19, 21)},
            {"_id": "qa4", "text": words(23, 24)},
            {"_id": "qa5", "text": words(13)},  # not judged in test: never encoded
        ],
        "qrels": {
            "test": [("qa1", "a1", 1), ("qa2", "a2", 2), ("qa2", "a6", 1), ("qa3", "a3", 1), ("qa4", "a4", 1), ("qa4", "a5", 0)],
            "dev": [("qa5", "a1", 1)],
        },
    },
    "beta": {
        "corpus": [
            {"_id": "b1", "title": "", "text": words(45, 46, 47)},
            {"_id": "b2", "title": "", "text": words(48, 49)},
            {"_id": "b3", "title": "", "text": words(50, 51, 52, 60)},  # w60: the NaN row of the broken model
            {"_id": "b4", "title": words(53), "text": words(54, 55)},
            {"_id": "b5", "title": "", "text": words(56, 57, 58, 59)},
        ],
        "queries": [
            {"_id": "qb1", "text": words(46, 47)},
            {"_id": "qb2", "text": words(51, 52)},
            {"_id": "qb3", "text": words(54, 59)},
        ],
        "qrels": {"test": [("qb1", "b1", 1), ("qb2", "b3", 1), ("qb3", "b4", 1), ("qb3", "b5", 1)]},
    },
}


def _document_text(doc: dict) -> str:
    return (doc["title"] + " " + doc["text"]).strip()


def _expected_task_measures(name: str) -> dict[str, float]:
    """Independent: numpy embeddings and search, pytrec_eval for the measures."""
    task = TASKS[name]
    qrels: dict[str, dict[str, int]] = {}
    for query_id, doc_id, relevance in task["qrels"]["test"]:
        qrels.setdefault(query_id, {})[doc_id] = relevance
    queries = [q for q in task["queries"] if q["_id"] in qrels]
    docs = task["corpus"]
    query_vectors = expected_embeddings([QUERY_PREFIX + q["text"] for q in queries], TABLE)
    doc_vectors = expected_embeddings([DOCUMENT_PREFIX + _document_text(d) for d in docs], TABLE)
    scores = query_vectors @ doc_vectors.T
    run = {q["_id"]: {d["_id"]: float(scores[i, j]) for j, d in enumerate(docs)} for i, q in enumerate(queries)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.3", "P.1", "map_cut.100"})
    per_query = evaluator.evaluate(run)
    mrr = []
    for query_id, ranking in run.items():
        ordered = sorted(ranking, key=lambda d: (-ranking[d], tuple(-b for b in d.encode())))[:10]
        mrr.append(next((1.0 / (rank + 1) for rank, d in enumerate(ordered) if qrels[query_id].get(d, 0) > 0), 0.0))

    def mean(key: str) -> float:
        return float(np.mean([per_query[q][key] for q in qrels]))

    return {
        "NDCG@10": mean("ndcg_cut_10"),
        "MRR@10": float(np.mean(mrr)),
        "Recall@3": mean("recall_3"),
        "P@1": mean("P_1"),
        "MAP@100": mean("map_cut_100"),
    }


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench") / "tiny"
    for name, task in TASKS.items():
        write_task(root / name, corpus=task["corpus"], queries=task["queries"], qrels=task["qrels"])
    spec = {"name": "tiny", "version": "3", "primary_measure": "NDCG@10", "measures": MEASURES, "tasks": list(TASKS)}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def submission(tmp_path_factory: pytest.TempPathFactory) -> Path:
    manifest = {"query_prefix": QUERY_PREFIX, "document_prefix": DOCUMENT_PREFIX, "training": {"setting": "fine-tuned", "datasets": ["none"]}}
    return onnx_submission(tmp_path_factory.mktemp("sub") / "tiny-model", table=TABLE, manifest=manifest)


def _run(runner: CliRunner, submission: Path, benchmark: Path, out: Path, *extra: str):
    result = runner.invoke(
        cli, ["run", str(submission), "--benchmark", str(benchmark), "--out", str(out), "--threads", "1", "--sandbox", "none", *extra]
    )
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


def _resumed(stderr: str) -> set[str]:
    return set(re.findall(r"^(\w+): .*\(stored result, resumed\)$", stderr, flags=re.MULTILINE))


def _encoded(stderr: str) -> set[str]:
    return set(re.findall(r"^(\w+): encoding \d+ documents", stderr, flags=re.MULTILINE))


def test_the_prefixes_and_measures_make_a_discriminating_reference() -> None:
    """Sanity of the fixture itself: the model ranks some relevant documents first, not all."""
    alpha, beta = _expected_task_measures("alpha"), _expected_task_measures("beta")
    assert 0 < alpha["P@1"] and 0 < beta["P@1"]
    assert min(alpha["NDCG@10"], beta["NDCG@10"]) < 1


@pytest.mark.slow
def test_run_writes_a_valid_report_with_independently_computed_measures(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    out = tmp_path / "out"
    result = _run(CliRunner(), submission, benchmark, out)
    assert f"report: {out / 'report.json'}" in result.stdout
    report = _report(out)
    validate_report(report)
    assert report["benchmark"] == {"name": "tiny", "version": "3", "primary_measure": "NDCG@10"}
    assert report["subject"] == {"kind": "onnx", "name": "tiny-lookup", "digest": {"sha256": submission_digest(submission)}}
    assert report["labels"] == {"training": {"setting": "fine-tuned", "datasets": ["none"]}}
    assert report["policy"] == "strict"
    assert report["sandbox"]["kind"] == "none" and report["sandbox"]["threads"] == 1
    # In-process is not a sandbox, and the report says so; the limits that did apply are recorded.
    assert report["sandbox"]["isolated"] is False
    assert report["sandbox"]["limits"]["time_limit_s"] == 3600.0 and report["sandbox"]["limits"]["memory_bytes"] == 8 << 30

    for name in TASKS:
        task = report["tasks"][name]
        assert task["status"] == "scored" and task["failure"] is None
        assert task["split"] == "test"
        assert set(task["measures"]) == set(MEASURES)
        expected = _expected_task_measures(name)
        for measure, value in expected.items():
            assert task["measures"][measure] == pytest.approx(value, abs=1e-12), (name, measure)
        judged = len({q for q, _, _ in TASKS[name]["qrels"]["test"]})
        assert task["queries"] == {"judged": judged, "answered": judged, "missing": 0, "extra": 0}
    alpha = report["tasks"]["alpha"]
    assert alpha["encoding"]["dimension"] == 8
    assert alpha["encoding"]["corpus"]["texts"] == 6 and alpha["encoding"]["corpus"]["truncated"] == 1
    assert alpha["encoding"]["queries"]["texts"] == 4 and alpha["encoding"]["queries"]["truncated"] == 0

    ndcg = [report["tasks"][name]["measures"]["NDCG@10"] for name in TASKS]
    assert report["aggregate"]["measure"] == "NDCG@10"
    assert report["aggregate"]["score"] == pytest.approx(sum(ndcg) / 2, abs=1e-15)
    assert report["aggregate"]["complete"] is True
    # The table on stdout names both tasks.
    assert "alpha" in result.stdout and "beta" in result.stdout
    assert_cost_in_process(report["cost"])


def assert_cost_in_process(cost: dict) -> None:
    """The cost block of this in-process grade: present, bounded (the schema), measured by wait4; no timing asserted."""
    assert cost["scheme"] == "grader-cost/v1" and cost["source"] == "grader"
    assert re.fullmatch(r"[0-9a-f]{64}", cost["machine"]["fingerprint"])
    for name in TASKS:
        entry = cost["tasks"][name]
        judged = len({q for q, _, _ in TASKS[name]["qrels"]["test"]})
        assert entry["texts"] == len(TASKS[name]["corpus"]) + judged and entry["queries"] == judged
        # Measured in-process: the child's own CPU and peak resident memory (a process uses some), the tokens it fed the model.
        assert entry["cpu_s"] is not None and entry["cpu_s"] >= 0
        assert entry["peak_memory_bytes"] is not None and entry["peak_memory_bytes"] > 0
        assert entry["tokens"] is not None and entry["tokens"] > 0
        assert all(entry["wall_s"][step] is not None for step in ("encode", "search", "score"))
        assert entry["measured_by"].startswith("wait4")
        assert set(entry["missing"]) <= {"energy_j"}  # only energy may be unmeasured (RAPL), and then it says why
    assert cost["total"]["queries"] == 7 and cost["total"]["cpu_s"] is not None


def test_the_prefixes_matter_to_the_reference() -> None:
    """Were the runner to drop or swap the prefixes, the measures would differ."""
    global QUERY_PREFIX, DOCUMENT_PREFIX
    with_prefixes = _expected_task_measures("alpha")
    saved = (QUERY_PREFIX, DOCUMENT_PREFIX)
    try:
        for prefixes in (("", ""), (DOCUMENT_PREFIX, QUERY_PREFIX)):
            QUERY_PREFIX, DOCUMENT_PREFIX = prefixes
            assert _expected_task_measures("alpha") != with_prefixes
    finally:
        QUERY_PREFIX, DOCUMENT_PREFIX = saved


@pytest.mark.slow
def test_archive_submission_has_the_folder_digest_and_the_same_measures(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(submission, arcname="packed")
    folder_out, archive_out = tmp_path / "folder", tmp_path / "archive"
    _run(CliRunner(), submission, benchmark, folder_out, "--tasks", "alpha", "--quiet")
    result = _run(CliRunner(), archive, benchmark, archive_out, "--tasks", "alpha", "--quiet")
    assert result.stderr == ""
    folder_report, archive_report = _report(folder_out), _report(archive_out)
    assert archive_report["subject"]["digest"] == folder_report["subject"]["digest"] == {"sha256": submission_digest(submission)}
    assert archive_report["tasks"] == folder_report["tasks"]
    assert list(archive_report["tasks"]) == ["alpha"]
    assert archive_report["aggregate"]["complete"] is False


@pytest.mark.slow
def test_signed_report_verifies(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    runner = CliRunner()
    keys = tmp_path / "keys"
    assert runner.invoke(cli, ["keygen", "--out", str(keys)]).exit_code == 0
    out = tmp_path / "out"
    result = _run(runner, submission, benchmark, out, "--key", str(keys / "grader.key"), "--tasks", "beta")
    envelope = out / "report.dsse.json"
    assert f"report: {envelope}" in result.stdout
    verified = runner.invoke(cli, ["verify", str(envelope), "--key", str(keys / "grader.pub"), "--json"])
    assert verified.exit_code == 0, verified.stderr
    assert verified.stdout.encode("utf-8") == (out / "report.json").read_bytes()
    report = json.loads(verified.stdout)
    validate_report(report)
    assert report["tasks"]["beta"]["measures"]["NDCG@10"] == pytest.approx(_expected_task_measures("beta")["NDCG@10"], abs=1e-12)
    # A different key does not verify it.
    assert runner.invoke(cli, ["keygen", "--out", str(tmp_path / "other")]).exit_code == 0
    assert runner.invoke(cli, ["verify", str(envelope), "--key", str(tmp_path / "other" / "grader.pub")]).exit_code == 1


@pytest.mark.slow
def test_runs_resume_from_stored_tasks(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "out"

    first = _run(runner, submission, benchmark, out, "--tasks", "alpha")
    assert _encoded(first.stderr) == {"alpha"} and _resumed(first.stderr) == set()
    stored = sorted((out / "tasks").glob("*.json"))
    assert [p.name.split(".")[0] for p in stored] == ["alpha"]
    alpha_first = _report(out)["tasks"]["alpha"]

    second = _run(runner, submission, benchmark, out)
    assert _resumed(second.stderr) == {"alpha"} and _encoded(second.stderr) == {"beta"}
    report = _report(out)
    assert report["tasks"]["alpha"] == alpha_first
    # A resumed task cost nothing in this run, and is left out of its totals.
    assert report["cost"]["tasks"]["alpha"] == {"resumed": True} and report["cost"]["total"]["queries"] == 3
    assert report["aggregate"]["complete"] is True
    beta_second = report["tasks"]["beta"]

    # An unreadable stored entry is recomputed, to the same result, and stored again.
    (alpha_file,) = (out / "tasks").glob("alpha.*.json")
    alpha_file.write_text('{"key": {"grader": ', encoding="utf-8")
    third = _run(runner, submission, benchmark, out)
    assert _encoded(third.stderr) == {"alpha"} and _resumed(third.stderr) == {"beta"}
    assert _report(out)["tasks"] == {"alpha": alpha_first, "beta": beta_second}
    assert json.loads(alpha_file.read_text(encoding="utf-8"))["entry"]["measures"] == alpha_first["measures"]

    # What is resumed is the stored entry itself (nothing is recomputed).
    stored_entry = json.loads(alpha_file.read_text(encoding="utf-8"))
    # (Not the primary NDCG@10: the report checks that against the stored per-query values.)
    stored_entry["entry"]["measures"]["MAP@100"] = 0.125  # a measure this run asks for (a foreign one is graded again)
    alpha_file.write_text(json.dumps(stored_entry), encoding="utf-8")
    fourth = _run(runner, submission, benchmark, out)
    assert _resumed(fourth.stderr) == {"alpha", "beta"}
    assert _report(out)["tasks"]["alpha"]["measures"]["MAP@100"] == 0.125

    # A different depth is a different result: nothing is resumed.
    fifth = _run(runner, submission, benchmark, out, "--top-k", "3")
    assert _resumed(fifth.stderr) == set() and _encoded(fifth.stderr) == {"alpha", "beta"}
    assert _report(out)["tasks"]["alpha"]["measures"]["Recall@3"] == alpha_first["measures"]["Recall@3"]


@pytest.mark.slow
def test_a_model_failing_on_one_task_fails_only_that_task(tmp_path: Path, benchmark: Path) -> None:
    table = TABLE.copy()
    table[WORDS.index("w60")] = np.nan  # only beta's document b3 has w60
    manifest = {"query_prefix": QUERY_PREFIX, "document_prefix": DOCUMENT_PREFIX}
    broken = onnx_submission(tmp_path / "broken", table=table, manifest=manifest)
    out = tmp_path / "out"
    result = _run(CliRunner(), broken, benchmark, out)
    assert re.search(r"^beta: FAILED MODEL_ERROR: .*NaN", result.stderr, flags=re.MULTILINE)
    report = _report(out)
    validate_report(report)
    beta = report["tasks"]["beta"]
    assert beta["status"] == "failed"
    assert beta["failure"]["code"] == "MODEL_ERROR"
    assert "NaN" in beta["failure"]["message"]
    assert beta["measures"] == {}
    assert beta["queries"] == {"judged": 3, "answered": 0, "missing": 3, "extra": 0}
    alpha = report["tasks"]["alpha"]
    assert alpha["status"] == "scored"
    expected = _expected_task_measures("alpha")
    assert alpha["measures"] == pytest.approx(expected, abs=1e-12)
    assert report["aggregate"]["score"] is None and report["aggregate"]["complete"] is False


def test_bad_submission_is_one_error_line(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(submission / "submission.json", arcname="../submission.json")
    result = CliRunner().invoke(
        cli, ["run", str(archive), "--benchmark", str(benchmark), "--out", str(tmp_path / "out"), "--threads", "1", "--sandbox", "none"]
    )
    assert result.exit_code == 3  # the submission's fault (grader.cli.exits)
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"error: {archive}: archive member '../submission.json' contains '..'"]
