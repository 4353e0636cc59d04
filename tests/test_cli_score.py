"""``grader score`` end to end through the CLI: outputs, policies, errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytrec_eval
from click.testing import CliRunner

from grader.cli.main import cli

QRELS = {"q1": {"d1": 1, "d2": 2}, "q2": {"d3": 1}, "q3": {"d4": 1}}
RUN = {"q1": {"d1": 0.75, "d2": 0.5, "d5": 0.875}, "q2": {"d6": 1.0, "d3": 0.5}, "q9": {"d1": 1.0}}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, docs in QRELS.items() for d, r in docs.items()), encoding="utf-8"
    )
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{q} Q0 {d} 0 {s} x\n" for q, docs in RUN.items() for d, s in docs.items()), encoding="utf-8")
    return qrels, run


def _pytrec(measure: str) -> dict[str, float]:
    evaluator = pytrec_eval.RelevanceEvaluator(QRELS, {measure.rsplit("_", 1)[0]})
    return {q: v[measure] for q, v in evaluator.evaluate(RUN).items()}


def test_json_output_strict_counts_missing_queries_as_zero(files: tuple[Path, Path]) -> None:
    qrels, run = files
    result = CliRunner().invoke(
        cli, ["score", "--qrels", str(qrels), "--run", str(run), "--measure", "NDCG@10", "--measure", "P@1", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    reference = _pytrec("ndcg_cut_10")  # q1, q2 present; q3 missing -> 0 under strict
    assert data["policy"] == "strict"
    assert data["n_queries"] == 3
    assert data["queries"] == {"judged": 3, "answered": 2, "missing": 1, "extra": 1}
    assert abs(data["measures"]["NDCG@10"] - (reference["q1"] + reference["q2"] + 0.0) / 3) <= 1e-12
    assert list(data["measures"]) == ["NDCG@10", "P@1"]


def test_coir_policy_averages_only_answered_queries(files: tuple[Path, Path]) -> None:
    qrels, run = files
    result = CliRunner().invoke(
        cli, ["score", "--qrels", str(qrels), "--run", str(run), "--measure", "NDCG@10", "--policy", "coir", "--format", "json"]
    )
    reference = _pytrec("ndcg_cut_10")
    data = json.loads(result.stdout)
    assert data["n_queries"] == 2
    assert abs(data["measures"]["NDCG@10"] - (reference["q1"] + reference["q2"]) / 2) <= 1e-12


def test_coir_format_has_coir_shape_and_five_decimals(files: tuple[Path, Path]) -> None:
    qrels, run = files
    result = CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(run), "--policy", "coir", "--format", "coir"])
    data = json.loads(result.stdout)["metrics"]
    assert set(data) == {"NDCG", "MAP", "Recall", "Precision", "MRR"}
    assert list(data["Precision"]) == ["P@1", "P@3", "P@5", "P@10", "P@100", "P@1000"]
    reference = _pytrec("ndcg_cut_10")
    assert data["NDCG"]["NDCG@10"] == round((reference["q1"] + reference["q2"]) / 2, 5)


def test_table_and_per_query_file(files: tuple[Path, Path], tmp_path: Path) -> None:
    qrels, run = files
    per_query = tmp_path / "out" / "per_query.tsv"
    result = CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(run), "--measure", "MRR@10", "--per-query", str(per_query)])
    assert result.exit_code == 0
    assert "MRR@10" in result.stdout and "1 missing" in result.stdout
    rows = [line.split("\t") for line in per_query.read_text(encoding="utf-8").splitlines()]
    assert rows[0] == ["query-id", "MRR@10"]
    # q1: d5 (0.875, unjudged) then d1 (relevant) -> 1/2; q2: d6 then d3 -> 1/2; q3 missing -> 0
    assert {row[0]: float(row[1]) for row in rows[1:]} == {"q1": 0.5, "q2": 0.5, "q3": 0.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--measure", "NDCG10"], "unknown measure 'NDCG10'"),
        (["--run-format", "json"], "invalid JSON"),
    ],
)
def test_bad_arguments_exit_non_zero_with_one_line(files: tuple[Path, Path], args: list[str], message: str) -> None:
    qrels, run = files
    result = CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(run), *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.startswith("error: ")
    assert result.stdout == ""


def test_bad_run_leaves_no_per_query_file(files: tuple[Path, Path], tmp_path: Path) -> None:
    qrels, _ = files
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 0.5 x\nq1 Q0 d1 2 0.25 x\n", encoding="utf-8")
    per_query = tmp_path / "pq.tsv"
    result = CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(bad), "--per-query", str(per_query)])
    assert result.exit_code == 2
    assert f"{bad}:2: docid: document 'd1' appears twice" in result.stderr
    assert not per_query.exists()
    assert list(tmp_path.glob(".pq.tsv*")) == []


def test_signed_report_carries_the_printed_measures_and_verifies(files: tuple[Path, Path], tmp_path: Path) -> None:
    from grader.files import sha256_file
    from grader.reports import load_public_key, verify_report_file

    qrels, run = files
    runner = CliRunner()
    assert runner.invoke(cli, ["keygen", "--out", str(tmp_path / "keys")]).exit_code == 0
    envelope = tmp_path / "out" / "report.dsse.json"
    result = runner.invoke(
        cli,
        [
            "score",
            "--qrels",
            str(qrels),
            "--run",
            str(run),
            "--measure",
            "NDCG@10,MAP@10",
            "--format",
            "json",
            "--out",
            str(envelope),
            "--sign",
            str(tmp_path / "keys" / "grader.key"),
        ],
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)["measures"]
    verified = verify_report_file(envelope, load_public_key(tmp_path / "keys" / "grader.pub")).report
    assert verified["subject"]["digest"]["sha256"] == sha256_file(run)
    assert verified["tasks"]["qrels.tsv"]["data_digest"]["sha256"] == sha256_file(qrels)
    assert verified["tasks"]["qrels.tsv"]["measures"] == printed
    assert verified["aggregate"]["score"] == printed["NDCG@10"]
    assert verified["tasks"]["qrels.tsv"]["queries"] == {"judged": 3, "answered": 2, "missing": 1, "extra": 1}
    assert (envelope.parent / "report.json").is_file()


def test_sign_without_out_is_a_usage_error(files: tuple[Path, Path], tmp_path: Path) -> None:
    qrels, run = files
    result = CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(run), "--sign", str(tmp_path / "k")])
    assert result.exit_code == 2
    assert "--sign needs --out" in result.stderr
