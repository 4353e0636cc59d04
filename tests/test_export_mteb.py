"""``grader export-mteb``: MTEB result files from a report, checked with the pinned ``mteb`` itself.

A real ``grader run`` (tiny ONNX lookup models, in process) grades two CoIR-named
tasks; the exported files are loaded with mteb's own ``TaskResult.from_disk`` and
``ResultCache.load_results``, and every exported score is compared with what mteb's
retrieval evaluator computes on the same run (its scoring functions called
directly: no model, no dataset download). Needs the ``mteb`` extra; skipped with the
reason when it is missing, unless ``GRADER_REQUIRE_MTEB=1``.
"""

from __future__ import annotations

import hashlib
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
from grader.reports.assemble import without_per_query
from grader.reports.model import validate_report
from grader.retrieval.search import search_run
from tests.conftest import write_task
from tests.onnx_models import embedding_table, onnx_submission

TASKS = ("cosqa", "CodeSearchNet-go", "CodeSearchNet-python")
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


@pytest.mark.slow
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
    # The published result points back to its grade: the report file by name and by the sha256 of its bytes.
    meta = json.loads((folder / "model_meta.json").read_text())
    report_sha256 = hashlib.sha256((run_dir / "report.json").read_bytes()).hexdigest()
    assert meta["grader_reports"] == [str(run_dir / "report.json")]
    assert meta["grader_report_sha256"] == {str(run_dir / "report.json"): report_sha256}
    assert "export-mteb: cosqa -> CosQA (default): 39 scores" in result.stderr
    assert "export-mteb: not exported: nauc_* (MTEB's abstention scores need the retrieval scores of each query's ranking" in result.stderr
    assert "hit_rate_at_k beyond @1 and the per-query measure's cut-off" in result.stderr
    for task in TASKS:
        mteb_task = mteb.get_task(MTEB_TASKS[task].name)
        loaded = TaskResult.from_disk(folder / f"{mteb_task.metadata.name}.json")
        assert loaded.task_name == mteb_task.metadata.name and loaded.dataset_revision == mteb_task.metadata.revision
        [subset] = [s for s in loaded.scores["test"] if s["hf_subset"] == MTEB_TASKS[task].hf_subset]
        expected = _mteb_evaluation(bench, run_dir, task)
        exported = {key: value for key, value in subset.items() if isinstance(value, float) and key != "main_score"}
        # Every key MTEB computes is exported with MTEB's value, except the nAUC ones and the hit rates a report does not
        # determine (@1 is P@1; @10 is the share of positive per-query NDCG@10 values, the report's primary measure).
        exportable = {k for k in expected if not k.startswith(("nauc", "hit_rate"))} | {"hit_rate_at_1", "hit_rate_at_10"}
        assert exportable == set(exported)
        assert len([k for k in expected if k.startswith("nauc_")]) == 105  # docs/mteb.md: 5 families x 7 cut-offs x 3 confidences
        for key, value in exported.items():
            assert value == expected[key], (task, key, value, expected[key])
        assert exported["hit_rate_at_10"] != exported["recall_at_10"]  # queries have several relevant documents: not a recall
        assert subset["main_score"] == expected["ndcg_at_10"]
    # MTEB's own loader reads the folder as a results repository.
    results = ResultCache(out).load_results(models=["org/tiny-model"], include_remote=False, validate_and_filter=False)
    [model] = results.model_results
    assert model.model_name == "org/tiny-model" and model.model_revision == digest
    assert sorted(r.task_name for r in model.task_results) == ["COIRCodeSearchNetRetrieval", "CosQA"]
    [csn] = [r for r in model.task_results if r.task_name == "COIRCodeSearchNetRetrieval"]
    assert sorted(s["hf_subset"] for s in csn.scores["test"]) == ["go", "python"]


@pytest.mark.slow
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
    scores = mteb_scores({"NDCG@10": 0.1234567891, "MRR@10": 0.1234567891, "Recall@1": 0.5, "NDCG@2": 0.3, "bpref@1": 1.0})
    assert scores == {"ndcg_at_10": 0.12346, "main_score": 0.12346, "mrr_at_10": 0.123457, "recall_at_1": 0.5, "accuracy": 0.5}


def _report_copy(run_dir: Path, tmp_path: Path, change) -> Path:
    report = json.loads((run_dir / "report.json").read_text())
    change(report)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.update(policy="coir"), "the report's policy is 'coir'; MTEB keeps documents whose id equals the query id"),
        (lambda r: r["tasks"]["cosqa"]["queries"].update(missing=2), "task 'cosqa': 2 judged queries got no ranking"),
        (lambda r: r["tasks"]["cosqa"].update(split="dev"), "task 'cosqa' was graded on split 'dev'; MTEB evaluates CosQA on 'test'"),
        (lambda r: r["tasks"]["cosqa"].update(status="failed"), "task 'cosqa' was not scored"),
        (lambda r: r["tasks"]["cosqa"]["queries"].update(judged=5), "task 'cosqa' scores 5 of the 12 answered queries (a report of part"),
    ],
)
def test_refusals(graded, tmp_path, change, message):
    _bench, run_dir = graded
    report = _report_copy(run_dir, tmp_path, change)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        export_mteb(report, tmp_path / "out", assume_revisions=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
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


def test_hit_rates_a_report_determines():
    """Hand-worked: success@1 is P@1; success@k is the share of queries whose measure at k is positive."""
    per_query = {"measure": "NDCG@10", "values": {"a": 0.0, "b": 0.31, "c": 1.0, "d": 0.0, "e": 1e-300, "f": 0.0, "g": 0.5}}
    scores = mteb_scores({"P@1": 2 / 7, "NDCG@10": 0.4}, per_query)
    assert scores["hit_rate_at_1"] == 0.28571 and scores["hit_rate_at_10"] == 0.57143  # 2/7 and 4/7, rounded to 5 as MTEB does
    # A per-query measure at a cut-off MTEB does not evaluate gives nothing.
    assert "hit_rate_at_2" not in mteb_scores({}, {"measure": "MRR@2", "values": {"a": 1.0}})
    assert mteb_scores({}, None) == {}


@pytest.mark.slow
def test_report_records_top_k_and_shallow_or_unrecorded_depth_is_refused(graded, tmp_path):
    bench, run_dir = graded
    report = json.loads((run_dir / "report.json").read_text())
    assert report["ranking"] == {"top_k": 1000}
    submission = onnx_submission(tmp_path / "sub", table=embedding_table(dim=8, seed=3), manifest={"name": "org/tiny-model"})
    args = ["run", str(submission), "--benchmark", str(bench), "--tasks", "cosqa", "--top-k", "5", "--sandbox", "none", "--quiet"]
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    shallow = tmp_path / "run" / "report.json"
    assert json.loads(shallow.read_text())["ranking"] == {"top_k": 5}
    result = CliRunner().invoke(cli, ["export-mteb", str(shallow), "--out", str(tmp_path / "out"), "--assume-mteb-revisions"])
    assert result.exit_code == 2
    assert "cannot export to MTEB: the report's rankings were cut at --top-k 5; MTEB ranks 1000 documents per query" in result.stderr
    assert "hint: grade again with `grader run` and --top-k 1000 (the default)" in result.stderr
    # A report from before the field existed still validates, and is refused rather than assumed to be 1000 deep.
    old = _report_copy(run_dir, tmp_path, lambda r: r.pop("ranking"))
    validate_report(json.loads(old.read_text()))
    with pytest.raises(UsageError, match=r"the report does not record its ranking depth \(--top-k; reports of older graders lack ranking.top_k\)"):
        export_mteb(old, tmp_path / "out", assume_revisions=True)
    deeper = _report_copy(run_dir, tmp_path, lambda r: r.update(ranking={"top_k": 5000}))  # @1000 of a deeper ranking is MTEB's
    export_mteb(deeper, tmp_path / "deeper", assume_revisions=True, tasks=["cosqa"])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_without_per_query_values_only_the_hit_rate_at_1_is_exported(graded, tmp_path):
    _bench, run_dir = graded
    report = _report_copy(run_dir, tmp_path, lambda r: r.update(without_per_query(r)))
    [path, _meta] = export_mteb(report, tmp_path / "out", assume_revisions=True, tasks=["cosqa"])
    scores = json.loads(path.read_text())["scores"]["test"][0]
    assert [k for k in scores if k.startswith("hit_rate")] == ["hit_rate_at_1"]
    assert scores["hit_rate_at_1"] == scores["precision_at_1"]


def _subsets(path: Path) -> dict[str, dict]:
    return {s["hf_subset"]: s for s in json.loads(path.read_text())["scores"]["test"]}


@pytest.mark.slow
def test_codesearchnet_languages_from_several_exports_are_merged(graded, tmp_path):
    """The six CodeSearchNet languages are one MTEB task: a second export adds its language and keeps the others."""
    mteb = _mteb()
    from mteb.results import TaskResult

    bench, run_dir = graded
    out = tmp_path / "out"
    export = ["export-mteb", str(run_dir / "report.json"), "--out", str(out), "--assume-mteb-revisions", "--tasks"]
    assert CliRunner().invoke(cli, [*export, "CodeSearchNet-go"]).exit_code == 0
    [folder] = (out / "results" / "org__tiny-model").iterdir()
    csn = folder / "COIRCodeSearchNetRetrieval.json"
    go = _subsets(csn)["go"]
    assert set(_subsets(csn)) == {"go"}
    result = CliRunner().invoke(cli, [*export, "CodeSearchNet-python"])
    assert result.exit_code == 0, result.output
    assert "COIRCodeSearchNetRetrieval.json: keeping subsets go already there; writing python" in result.stderr
    assert _subsets(csn)["go"] == go and set(_subsets(csn)) == {"go", "python"}
    loaded = TaskResult.from_disk(csn)
    assert loaded.task_name == mteb.get_task("COIRCodeSearchNetRetrieval").metadata.name
    for subset in loaded.scores["test"]:
        expected = _mteb_evaluation(bench, run_dir, f"CodeSearchNet-{subset['hf_subset']}")
        expected["main_score"] = expected["ndcg_at_10"]
        assert all(subset[key] == expected[key] for key in subset if isinstance(subset[key], float)), subset["hf_subset"]
    # Exporting a language again replaces that language only.
    assert CliRunner().invoke(cli, [*export, "CodeSearchNet-go"]).exit_code == 0
    assert _subsets(csn) == {"go": go, "python": _subsets(csn)["python"]}
    assert sorted(p.name for p in folder.iterdir()) == ["COIRCodeSearchNetRetrieval.json", "model_meta.json"]


@pytest.mark.slow
def test_merging_refuses_another_submission_or_a_file_it_did_not_write(graded, tmp_path):
    _bench, run_dir = graded
    out = tmp_path / "out"
    export_mteb(run_dir / "report.json", out, assume_revisions=True, tasks=["CodeSearchNet-go"], revision="main")
    folder = out / "results" / "org__tiny-model" / "main"
    csn = folder / "COIRCodeSearchNetRetrieval.json"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    other = _report_copy(run_dir, tmp_path, lambda r: r["subject"].update(digest={"sha256": "f" * 64}))
    with pytest.raises(UsageError, match=r"holds submission sha256:[0-9a-f]{64}, not this report's submission \(sha256:f{64}\)"):
        export_mteb(other, out, assume_revisions=True, tasks=["CodeSearchNet-python"], revision="main")
    result = json.loads(csn.read_text())
    csn.write_text(json.dumps({**result, "mteb_version": "1.0.0"}))
    with pytest.raises(InputError, match=r"COIRCodeSearchNetRetrieval.json: mteb_version: is '1.0.0', expected '2.26.24'"):
        export_mteb(run_dir / "report.json", out, assume_revisions=True, tasks=["CodeSearchNet-python"], revision="main")
    result["scores"]["test"][0]["ndcg_at_10"] = "high"
    csn.write_text(json.dumps(result))
    with pytest.raises(InputError, match=r"scores.test\[0\]: holds a value that is not a score"):
        export_mteb(run_dir / "report.json", out, assume_revisions=True, tasks=["CodeSearchNet-python"], revision="main")
    result["scores"]["test"][0]["hf_subset"] = "cobol"
    csn.write_text(json.dumps(result))
    with pytest.raises(InputError, match=r"scores.test\[0\].hf_subset: 'cobol' is not a new subset of COIRCodeSearchNetRetrieval"):
        export_mteb(run_dir / "report.json", out, assume_revisions=True, tasks=["CodeSearchNet-python"], revision="main")
    csn.write_text("{")
    with pytest.raises(InputError, match="COIRCodeSearchNetRetrieval.json: not valid JSON"):
        export_mteb(run_dir / "report.json", out, assume_revisions=True, tasks=["CodeSearchNet-python"], revision="main")
    csn.write_bytes(before[csn.name])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing else was touched by the refusals


@pytest.mark.slow
def test_a_hosts_public_part_report_is_refused(graded, tmp_path):
    """A leaderboard's public-part report scores a share of each task's queries: not MTEB's numbers."""
    from grader.hosting.leaderboard.public_report import public_part_report
    from grader.hosting.leaderboard.values import SignedValues

    _bench, run_dir = graded
    report = json.loads((run_dir / "report.json").read_text())
    values = {name: dict(task["per_query"]["values"]) for name, task in report["tasks"].items()}
    groups = {g: list(m) for g, m in report["aggregate"].get("group_members", {}).items()}
    public = public_part_report(SignedValues(report, "NDCG@10", groups, values), b"k" * 32, 0.5, "c" * 64)
    validate_report(public)
    path = tmp_path / "public.json"
    path.write_text(json.dumps(public))
    with pytest.raises(UsageError, match=r"task '[^']+' scores [0-9]+ of the 12 answered queries \(a report of part of the queries\)"):
        export_mteb(path, tmp_path / "out", assume_revisions=True)
    assert not (tmp_path / "out").exists()
