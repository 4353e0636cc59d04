"""``--cross-check`` on ``grader score`` and ``grader run``: the grader's coir policy against the real pytrec_eval.

Agreement is shown on real data (mini's judgements, with a lexical-overlap run over mini's real texts: integer
scores, so many ties, and the full default measure list), and a disagreement is forced by shifting the grader's
own per-query values in-process: it must exit 1 with a message naming the measure, the query and both values.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import grader.metrics.policy as policy_module
from grader.cli.main import cli
from grader.data.registry import resolve_benchmark
from grader.grading.interfaces import load_task_inputs
from grader.metrics.cross_check import STRICT_NOTE, TOLERANCE, cross_check
from grader.metrics.measures import parse_measures
from grader.metrics.per_query import PerQuery
from grader.runs.run import Run

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
TASK, SPLIT = "text2code", "test"
QRELS = REPO / "grader" / "bundled" / "mini" / TASK / "qrels" / f"{SPLIT}.tsv"
WORD = re.compile(r"[a-z]{3,}")


def overlap_run(top: int = 100) -> dict[str, dict[str, float]]:
    """A real if weak run on mini's text2code: each document scored by the words it shares with the query."""
    inputs = load_task_inputs(resolve_benchmark("mini").task(TASK), SPLIT)
    postings: dict[str, list[str]] = {}
    for document in inputs.documents:
        for word in set(WORD.findall(f"{document.title} {document.text}".lower())):
            postings.setdefault(word, []).append(document.id)
    run: dict[str, dict[str, float]] = {}
    for query in inputs.queries:
        counts: dict[str, float] = {}
        for word in set(WORD.findall(query.text.lower())):
            for doc_id in postings.get(word, ()):
                counts[doc_id] = counts.get(doc_id, 0.0) + 1.0
        run[query.id] = dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top])
    return run


@pytest.fixture(scope="module")
def run_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cross-check") / "overlap.trec"
    lines = [f"{q} Q0 {d} {rank} {score:g} overlap\n" for q, docs in overlap_run().items() for rank, (d, score) in enumerate(docs.items(), 1)]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def shifted_engine(monkeypatch: pytest.MonkeyPatch, by: float) -> None:
    """Shift every per-query value the grader computes by ``by`` (the engine broken on purpose)."""
    real = policy_module.per_query_measures

    def broken(*args, **kwargs) -> PerQuery:  # type: ignore[no-untyped-def]
        found = real(*args, **kwargs)
        return PerQuery(found.query_ids, {m: np.minimum(column + by, 1.0) for m, column in found.values.items()})

    monkeypatch.setattr(policy_module, "per_query_measures", broken)


def test_score_cross_check_agrees_with_pytrec_eval_on_real_data(run_file: Path) -> None:
    result = CliRunner().invoke(cli, ["score", "--qrels", str(QRELS), "--run", str(run_file), "--cross-check", "--format", "json"])
    assert result.exit_code == 0, result.output
    # every default measure but MRR@k (not in pytrec_eval), over the 881 judged test queries the run answers
    assert re.search(r"cross-check passed: 24 measure\(s\) x 881 queries agree with pytrec_eval", result.stderr), result.stderr
    assert "not in pytrec_eval at a cut-off, not compared: MRR@1, MRR@3, MRR@5, MRR@10, MRR@100, MRR@1000" in result.stderr
    assert f"note: {STRICT_NOTE}" in result.stderr
    assert "strict numbers" in STRICT_NOTE and "not comparable to pytrec_eval" in STRICT_NOTE


def test_a_disagreement_beyond_the_tolerance_exits_1_and_writes_nothing(run_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shifted_engine(monkeypatch, 1e-9)
    report = tmp_path / "report.json"
    args = ["score", "--qrels", str(QRELS), "--run", str(run_file), "--measure", "NDCG@10", "--cross-check", "--out", str(report)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert re.search(
        r"cross-check failed: \d+ value\(s\) differ from pytrec_eval by more than 1e-12 \(largest 1\.000e-09\): NDCG@10 query '", result.stderr
    )
    assert "Traceback" not in result.output and not report.exists()


def test_a_difference_within_the_tolerance_passes(run_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shifted_engine(monkeypatch, TOLERANCE / 4)
    result = CliRunner().invoke(cli, ["score", "--qrels", str(QRELS), "--run", str(run_file), "--measure", "P@10", "--cross-check"])
    assert result.exit_code == 0, result.output
    assert "cross-check passed: 1 measure(s) x 881 queries" in result.stderr


def test_queries_evaluated_differently_are_a_disagreement(monkeypatch: pytest.MonkeyPatch) -> None:
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    run = Run.from_mapping({"q1": {"d1": 1.0}, "q2": {"d2": 1.0, "d1": 0.5}})
    measures = parse_measures(["NDCG@10"])
    assert cross_check(qrels, run, measures).queries == 2
    real = policy_module.per_query_measures

    def one_query_lost(*args, **kwargs) -> PerQuery:  # type: ignore[no-untyped-def]
        found = real(*args, **kwargs)
        return PerQuery(found.query_ids[:1], {m: column[:1] for m, column in found.values.items()})

    monkeypatch.setattr(policy_module, "per_query_measures", one_query_lost)
    with pytest.raises(Exception, match=r"the grader evaluated 1 queries, pytrec_eval 2 \(only the grader: \[\]; only pytrec_eval: \['q2'\]\)"):
        cross_check(qrels, run, measures)


def test_only_mrr_cannot_be_cross_checked(run_file: Path) -> None:
    result = CliRunner().invoke(cli, ["score", "--qrels", str(QRELS), "--run", str(run_file), "--measure", "MRR@10", "--cross-check"])
    assert result.exit_code == 2
    assert "none of the measures is one pytrec_eval has" in result.stderr


@pytest.mark.slow
def test_run_cross_check_agrees_and_a_broken_engine_stops_the_grade(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["run", str(EXAMPLE), "--benchmark", "mini", "--tasks", TASK, "--split", "dev", "--sandbox", "none", "--threads", "1", "--cross-check"]
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "ok")])
    assert result.exit_code == 0, result.output
    assert re.search(rf"{TASK}: cross-check passed: \d+ measure\(s\) x 294 queries agree with pytrec_eval", result.stderr), result.stderr
    assert f"note: {STRICT_NOTE}" in result.stderr
    shifted_engine(monkeypatch, 1e-9)
    broken = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "broken")])
    assert broken.exit_code == 1, broken.output
    assert "cross-check failed:" in broken.stderr and not (tmp_path / "broken" / "report.json").exists()
