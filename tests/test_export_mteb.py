"""``grader export-mteb``: MTEB result files from a report, checked with the pinned ``mteb`` itself.

A real ``grader run`` (tiny ONNX lookup models, in process) grades two CoIR-named
tasks; the exported files are loaded with mteb's own ``TaskResult.from_disk`` and
``ResultCache.load_results``, and every exported score is compared with what mteb's
retrieval evaluator computes on the same run (its scoring functions called
directly: no model, no dataset download). Needs the ``mteb`` extra; skipped with the
reason when it is missing, unless ``GRADER_REQUIRE_MTEB=1``.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.data.registry import registered_spec, resolve_benchmark
from grader.errors import InputError, UsageError
from grader.export import MTEB_TASKS, MTEB_VERSION, export_mteb, mteb_scores
from grader.metrics.measures import parse_measure
from grader.metrics.policy import Policy, evaluate
from grader.retrieval.search import search_run
from tests.conftest import write_task
from tests.onnx_models import embedding_table, onnx_submission

TASKS = ("cosqa", "CodeSearchNet-go")
MEASURES = [f"{family}@{k}" for family in ("NDCG", "MAP", "Recall", "P", "MRR") for k in (1, 3, 5, 10, 20, 100, 1000)]


def _mteb():
    if importlib.util.find_spec("mteb") is None:
        reason = f"needs mteb=={MTEB_VERSION} (pip install -e '.[mteb]')"
        if os.environ.get("GRADER_REQUIRE_MTEB") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    import mteb

    return mteb


def _w(*numbers: int) -> str:
    return " ".join(f"w{n}" for n in numbers)


def _benchmark(root: Path) -> Path:
    """Two tasks with few words per text (so many score ties), graded relevance, and a document whose id is a query's id."""
    rng = np.random.default_rng(7)
    for name in TASKS:
        docs = [f"d{i}" for i in range(40)] + ["q3"]  # "q3" is also a query id: MTEB keeps it, the coir policy drops it
        corpus = [{"_id": d, "title": "", "text": _w(*rng.choice(np.arange(3, 30), size=2))} for d in docs]
        queries = [{"_id": f"q{i}", "text": _w(*rng.choice(np.arange(3, 30), size=2))} for i in range(12)]
        test = [(f"q{i}", docs[int(j)], int(rng.integers(1, 3))) for i in range(12) for j in rng.choice(len(docs), size=2, replace=False)]
        test.append(("q3", "q3", 2))
        test = list({(q, d): (q, d, r) for q, d, r in test}.values())
        write_task(root / name, corpus=corpus, queries=queries, qrels={"test": test, "dev": test[:5]})
    spec = {"name": "coir", "version": "test", "primary_measure": "NDCG@10", "tasks": list(TASKS), "measures": MEASURES}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mteb")
    bench = _benchmark(root / "bench")
    submission = onnx_submission(root / "sub", table=embedding_table(dim=8, seed=3), manifest={"name": "org/tiny-model"})
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(submission),
            "--benchmark",
            str(bench),
            "--out",
            str(root / "run"),
            "--threads",
            "1",
            "--sandbox",
            "none",
            "--keep-embeddings",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    return bench, root / "run"


def _mteb_evaluation(bench: Path, run_dir: Path, task: str) -> dict[str, float]:
    """mteb's retrieval evaluator on the same run the grader scored (the kept embeddings searched the grader's way)."""
    from mteb._evaluators.retrieval_evaluator import RetrievalEvaluator
    from mteb._evaluators.retrieval_metrics import make_score_dict

    folder = run_dir / "embeddings" / task
    ids = json.loads((folder / "ids.json").read_text())
    run = search_run(ids["queries"], ids["corpus"], np.load(folder / "queries.npy"), np.load(folder / "corpus.npy"), 1000)
    qrels = {q: dict(docs) for q, docs in resolve_benchmark(str(bench)).task(task).qrels("test").items()}
    mteb_task = _mteb().get_task(MTEB_TASKS[task].name)
    evaluation = RetrievalEvaluator.evaluate(
        None,
        qrels,
        run.to_mapping(),
        mteb_task.k_values,
        ignore_identical_ids=mteb_task.ignore_identical_ids,
        skip_first_result=mteb_task.skip_first_result,  # type: ignore[arg-type]
    )
    scores = make_score_dict(
        ndcg=evaluation.ndcg,
        _map=evaluation.map,
        recall=evaluation.recall,
        precision=evaluation.precision,
        mrr=evaluation.mrr,
        naucs=evaluation.naucs,
        naucs_mrr=evaluation.naucs_mrr,
        hit_rate=evaluation.hit_rate,
        task_scores={},
    )
    return {key: round(value, 6) for key, value in scores.items() if isinstance(value, float)}  # TaskResult.to_disk rounds to 6


def test_exported_files_load_in_mteb_and_equal_its_evaluator(graded, tmp_path):
    mteb = _mteb()
    from mteb.cache import ResultCache
    from mteb.results import TaskResult

    bench, run_dir = graded
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export-mteb", str(run_dir / "report.json"), "--out", str(out), "--assume-mteb-revisions"])
    assert result.exit_code == 0, result.output
    digest = json.loads((run_dir / "report.json").read_text())["subject"]["digest"]["sha256"]
    folder = out / "results" / "org__tiny-model" / digest
    assert sorted(p.name for p in folder.iterdir()) == ["COIRCodeSearchNetRetrieval.json", "CosQA.json", "model_meta.json"]
    assert "export-mteb: cosqa -> CosQA (default): 37 scores" in result.stderr
    for task in TASKS:
        mteb_task = mteb.get_task(MTEB_TASKS[task].name)
        loaded = TaskResult.from_disk(folder / f"{mteb_task.metadata.name}.json")
        assert loaded.task_name == mteb_task.metadata.name and loaded.dataset_revision == mteb_task.metadata.revision
        [subset] = [s for s in loaded.scores["test"] if s["hf_subset"] == MTEB_TASKS[task].hf_subset]
        expected = _mteb_evaluation(bench, run_dir, task)
        exported = {key: value for key, value in subset.items() if isinstance(value, float) and key != "main_score"}
        # Every standard key MTEB computes is exported with MTEB's value, except the nAUC and hit-rate ones (need the run).
        assert {k for k in expected if not k.startswith(("nauc", "hit_rate"))} == set(exported)
        for key, value in exported.items():
            assert value == expected[key], (task, key, value, expected[key])
        assert subset["main_score"] == expected["ndcg_at_10"]
    # MTEB's own loader reads the folder as a results repository.
    results = ResultCache(out).load_results(models=["org/tiny-model"], include_remote=False, validate_and_filter=False)
    [model] = results.model_results
    assert model.model_name == "org/tiny-model" and model.model_revision == digest
    assert sorted(r.task_name for r in model.task_results) == ["COIRCodeSearchNetRetrieval", "CosQA"]


def test_the_coir_policy_would_not_equal_mteb(graded):
    """Why the export refuses a coir-policy report: dropping the document whose id is the query's changes the numbers."""
    _mteb()
    bench, run_dir = graded
    expected = _mteb_evaluation(bench, run_dir, "cosqa")
    folder = run_dir / "embeddings" / "cosqa"
    ids = json.loads((folder / "ids.json").read_text())
    run = search_run(ids["queries"], ids["corpus"], np.load(folder / "queries.npy"), np.load(folder / "corpus.npy"), 1000)
    qrels = resolve_benchmark(str(bench)).task("cosqa").qrels("test")
    measure = parse_measure("NDCG@10")
    strict = evaluate(qrels, run, [measure], Policy.STRICT).mean(measure)
    coir = evaluate(qrels, run, [measure], Policy.COIR).mean(measure)
    assert round(round(strict, 5), 6) == expected["ndcg_at_10"]
    assert round(round(coir, 5), 6) != expected["ndcg_at_10"]


def test_task_table_matches_the_pinned_mteb():
    mteb = _mteb()
    assert mteb.__version__ == MTEB_VERSION
    for grader_task, entry in MTEB_TASKS.items():
        task = mteb.get_task(entry.name)
        meta = task.metadata
        assert meta.revision == entry.revision, grader_task
        assert meta.eval_splits == [entry.split] and meta.main_score == "ndcg_at_10"
        assert list(meta.hf_subsets_to_langscripts[entry.hf_subset]) == list(entry.languages)
        assert tuple(task.k_values) == (1, 3, 5, 10, 20, 100, 1000)
        assert task.ignore_identical_ids is False and task.skip_first_result is False
    assert set(MTEB_TASKS) == set(registered_spec("coir").tasks)  # every CoIR task of the grader has its MTEB place


def test_rounding_and_keys():
    scores = mteb_scores({"NDCG@10": 0.1234567891, "MRR@10": 0.1234567891, "Recall@1": 0.5, "NDCG@2": 0.3, "Success@1": 1.0})
    assert scores == {"ndcg_at_10": 0.12346, "main_score": 0.12346, "mrr_at_10": 0.123457, "recall_at_1": 0.5, "accuracy": 0.5}


def _report_copy(run_dir: Path, tmp_path: Path, change) -> Path:
    report = json.loads((run_dir / "report.json").read_text())
    change(report)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.update(policy="coir"), "the report's policy is 'coir'; MTEB keeps documents whose id equals the query id"),
        (lambda r: r["tasks"]["cosqa"]["queries"].update(missing=2), "task 'cosqa': 2 judged queries got no ranking"),
        (lambda r: r["tasks"]["cosqa"].update(split="dev"), "task 'cosqa' was graded on split 'dev'; MTEB evaluates CosQA on 'test'"),
        (lambda r: r["tasks"]["cosqa"].update(status="failed"), "task 'cosqa' was not scored"),
    ],
)
def test_refusals(graded, tmp_path, change, message):
    _bench, run_dir = graded
    report = _report_copy(run_dir, tmp_path, change)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        export_mteb(report, tmp_path / "out", assume_revisions=True)
    assert not (tmp_path / "out").exists()


def test_revisions_must_be_stated_and_other_refusals(graded, tmp_path):
    _bench, run_dir = graded
    runner = CliRunner()
    result = runner.invoke(cli, ["export-mteb", str(run_dir / "report.json"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "cannot export to MTEB: a report does not say which dataset revision" in result.stderr
    assert "COIRCodeSearchNetRetrieval@4adc7bc41202, CosQA@bc5efb7e9d43" in result.stderr
    assert "hint: import CoIR at exactly those revisions, then pass --assume-mteb-revisions" in result.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match="task 'mini' has no MTEB counterpart"):
        export_mteb(run_dir / "report.json", tmp_path / "out", assume_revisions=True, tasks=["mini"])
    with pytest.raises(UsageError, match="did not grade task 'apps'"):
        export_mteb(run_dir / "report.json", tmp_path / "out", assume_revisions=True, tasks=["apps"])
    envelope = tmp_path / "report.dsse.json"
    envelope.write_text(json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": []}))
    with pytest.raises(InputError, match="is a signed envelope"):
        export_mteb(envelope, tmp_path / "out", assume_revisions=True)
    other = _report_copy(run_dir, tmp_path, lambda r: r.update(tasks={"mini": r["tasks"]["cosqa"]}))
    with pytest.raises(UsageError, match="grades no CoIR task MTEB holds"):
        export_mteb(other, tmp_path / "out", assume_revisions=True)
