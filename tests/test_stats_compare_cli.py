"""``grader compare`` end to end on real signed reports: `grader run` (in-process ONNX) and `grader score` (BM25 runs)."""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grader.reports.keys import load_public_key
from grader.reports.signing import write_signed_report
from grader.reports.verify import verify_report_file
from tests.cli_support import invoke

pytestmark = pytest.mark.slow  # a module-scoped fixture grades with `grader run` (an encoder child process)

ROOT = Path(__file__).resolve().parent.parent
MINI_TASK = ROOT / "grader" / "bundled" / "mini" / "text2code"
QRELS = MINI_TASK / "qrels" / "test.tsv"


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Signed reports of mini/text2code: the ONNX example at top-k 1000 and 3, BM25 at top 100 and top 3."""
    root = tmp_path_factory.mktemp("compare")
    assert invoke("keygen", "--out", root / "keys").exit_code == 0
    key = root / "keys" / "grader.key"
    paths = {"key": key, "pub": root / "keys" / "grader.pub"}
    for name, top_k in (("onnx", "1000"), ("onnx-top3", "3")):
        result = invoke(
            "run",
            ROOT / "submissions_example" / "onnx-lsa",
            "--benchmark",
            "mini",
            "--tasks",
            "text2code",
            "--sandbox",
            "none",
            "--threads",
            "1",
            "--top-k",
            top_k,
            "--key",
            key,
            "--out",
            root / name,
            "--quiet",
        )
        assert result.exit_code == 0, result.output
        paths[name] = root / name / "report.dsse.json"
    run = root / "bm25.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bm25_baseline.py"), str(MINI_TASK), "--split", "test", "--out", str(run)],
        check=True,
        capture_output=True,
    )
    short = root / "bm25-top3.jsonl"
    short.write_text("".join(json.dumps({**row, "hits": row["hits"][:3]}) + "\n" for row in map(json.loads, run.read_text().splitlines())))
    for name, run_path in (("bm25", run), ("bm25-top3", short)):
        result = invoke(
            "score", "--qrels", QRELS, "--run", run_path, "--measure", "NDCG@10", "--out", root / name / "report.dsse.json", "--sign", key
        )
        assert result.exit_code == 0, result.output
        paths[name] = root / name / "report.dsse.json"
    return paths


def test_signed_reports_carry_per_query_values(signed: dict[str, Path]) -> None:
    report = verify_report_file(signed["onnx"], load_public_key(signed["pub"])).report
    task = report["tasks"]["text2code"]
    values = task["per_query"]["values"]
    assert task["per_query"]["measure"] == "NDCG@10" and len(values) == 881
    assert math.fsum(values.values()) / len(values) == task["measures"]["NDCG@10"]


def test_compare_two_runs_of_the_onnx_example(signed: dict[str, Path]) -> None:
    result = invoke("compare", signed["onnx-top3"], signed["onnx"], "--key", signed["pub"], "--json", "--resamples", "2000")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    public_key = load_public_key(signed["pub"])
    reports = {name: verify_report_file(signed[name], public_key).report for name in ("onnx", "onnx-top3")}
    assert data["benchmark"] == {"name": "mini", "version": "2", "policy": "strict"}
    assert data["queries"] == 881 and data["tasks"] == ["text2code"]
    assert data["method"]["resamples"] == 2000 and data["method"]["seed"] == 0
    full, top3 = data["entries"]
    # Best first; the scores are the signed ones, each inside its interval.
    assert full["score"] == reports["onnx"]["aggregate"]["score"] and top3["score"] == reports["onnx-top3"]["aggregate"]["score"]
    assert full["score"] >= top3["score"]
    for entry in (full, top3):
        assert entry["ci_low"] <= entry["score"] <= entry["ci_high"]
    (pair,) = data["pairs"]
    assert pair["first"] == full["name"] and pair["second"] == top3["name"]
    assert pair["mean_difference"] == pytest.approx(full["score"] - top3["score"], abs=1e-12)
    # One comparison: Holm changes nothing.
    assert pair["t_p_holm"] == pair["t_p"] and pair["randomization_p_holm"] == pair["randomization_p"]
    # The same numbers again (fixed seed), and the text form names both entries.
    again = invoke("compare", signed["onnx-top3"], signed["onnx"], "--key", signed["pub"], "--json", "--resamples", "2000")
    assert json.loads(again.stdout)["entries"] == data["entries"]
    text = invoke("compare", signed["onnx"], signed["onnx-top3"], "--key", signed["pub"], "--resamples", "2000")
    assert text.exit_code == 0, text.output
    assert f"lsa-bpe-mini [{signed['onnx']}]" in text.stdout and f"lsa-bpe-mini [{signed['onnx-top3']}]" in text.stdout
    assert "95% CI" in text.stdout and "pairwise (1 comparison, Holm" in text.stdout
    # The cost column: each grade's CPU seconds per 1,000 queries, as its report states them (grader run measured both).
    assert "CPU s/1k q" in text.stdout
    for report_json in data["reports"]:
        assert report_json["cost"]["source"] == "grader" and report_json["cost"]["cpu_s_per_1000_queries"] >= 0
        figure = f"{report_json['cost']['cpu_s_per_1000_queries']:.2f}"
        assert any(figure in line and report_json["path"] in line for line in text.stdout.splitlines())


def test_compare_bm25_runs_scored_by_grader_score(signed: dict[str, Path]) -> None:
    result = invoke("compare", signed["bm25"], signed["bm25-top3"], "--key", signed["pub"], "--json", "--resamples", "1000")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [e["name"] for e in data["entries"]] == ["bm25.jsonl", "bm25-top3.jsonl"]
    assert [report["cost"] for report in data["reports"]] == [None, None]  # grader score measures no cost: n/a in the text form
    (pair,) = data["pairs"]
    # Truncating to 3 hits can only lower NDCG@10, and does on many queries: clearly separable.
    assert pair["mean_difference"] > 0 and pair["randomization_p"] < 0.01 and pair["t_p"] < 0.01
    assert [e["group"] for e in data["entries"]] == [1, 2]


def test_tampered_report_is_refused(signed: dict[str, Path], tmp_path: Path) -> None:
    envelope = json.loads(signed["bm25-top3"].read_bytes())
    payload = base64.b64decode(envelope["payload"])
    statement = json.loads(payload)
    values = statement["predicate"]["tasks"][QRELS.name]["per_query"]["values"]
    first = sorted(values)[0]
    values[first] = 1.0 if values[first] != 1.0 else 0.0
    envelope["payload"] = base64.b64encode(json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()).decode()
    tampered = tmp_path / "tampered.dsse.json"
    tampered.write_text(json.dumps(envelope))
    result = invoke("compare", signed["bm25"], tampered, "--key", signed["pub"], expect=1)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == f"error: {tampered}: bad signature"


def test_too_few_resamples_for_the_level_is_a_usage_error(signed: dict[str, Path]) -> None:
    # Both options are in click's ranges; grader.stats refuses the pair with a UsageError: exit 2, one line, no traceback.
    result = invoke("compare", signed["bm25"], signed["bm25-top3"], "--key", signed["pub"], "--resamples", "39", "--level", "0.99", expect=2)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "error: 39 resamples are too few for a 0.99 interval (need at least 200)\n"


def test_reports_of_different_benchmarks_are_refused(signed: dict[str, Path]) -> None:
    result = invoke("compare", signed["onnx"], signed["bm25"], "--key", signed["pub"], expect=2)
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line == f"error: {signed['bm25']} and {signed['onnx']} differ in benchmark: qrels-file 1 vs mini 2"


def _resign(report: dict, key: Path, out: Path) -> Path:
    envelope, _ = write_signed_report(report, key, out / "report.dsse.json")
    return envelope


def test_old_reports_and_different_queries_are_refused(signed: dict[str, Path], tmp_path: Path) -> None:
    public_key = load_public_key(signed["pub"])
    report = verify_report_file(signed["bm25-top3"], public_key).report
    # A report as an older grader wrote it: no per-query values. It still verifies (the schema is backward compatible).
    old = json.loads(json.dumps(report))
    del old["tasks"][QRELS.name]["per_query"]
    old_path = _resign(old, signed["key"], tmp_path / "old")
    assert invoke("verify", old_path, "--key", signed["pub"]).exit_code == 0
    result = invoke("compare", signed["bm25"], old_path, "--key", signed["pub"], expect=2)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"error: {old_path}: task {QRELS.name} has no per-query values (report made by an older grader)"
    # A report over one query fewer (its score recomputed so that it is a valid report).
    fewer = json.loads(json.dumps(report))
    task = fewer["tasks"][QRELS.name]
    dropped = sorted(task["per_query"]["values"])[-1]
    del task["per_query"]["values"][dropped]
    mean = math.fsum(task["per_query"]["values"].values()) / len(task["per_query"]["values"])
    task["measures"]["NDCG@10"] = mean
    fewer["aggregate"]["score"] = mean
    fewer_path = _resign(fewer, signed["key"], tmp_path / "fewer")
    result = invoke("compare", signed["bm25"], fewer_path, "--key", signed["pub"], expect=2)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {fewer_path} (bm25-top3.jsonl) and {signed['bm25']} (bm25.jsonl) are not over the same queries of task "
        f"'{QRELS.name}' (880 vs 881 queries; e.g. {dropped!r} is in only one)"
    )


def test_report_whose_values_do_not_average_to_its_score_cannot_be_built(signed: dict[str, Path]) -> None:
    from grader.errors import ReportError
    from grader.reports.model import build_report

    report = verify_report_file(signed["bm25"], load_public_key(signed["pub"])).report
    task = dict(report["tasks"][QRELS.name], name=QRELS.name)
    task["per_query"] = {"measure": "NDCG@10", "values": dict(task["per_query"]["values"], extra=1.0)}
    with pytest.raises(ReportError, match="per_query: values do not average"):
        now = datetime.now(UTC)
        build_report(
            benchmark=report["benchmark"],
            subject=report["subject"],
            tasks=[task],
            aggregate=report["aggregate"],
            policy="strict",
            started_at=now,
            finished_at=now,
        )


def test_a_report_without_per_query_values_still_signs_and_verifies(signed: dict[str, Path], tmp_path: Path) -> None:
    from grader.reports.assemble import without_per_query

    report = verify_report_file(signed["bm25"], load_public_key(signed["pub"])).report
    stripped = without_per_query(report)
    assert "per_query" in report["tasks"][QRELS.name] and "per_query" not in stripped["tasks"][QRELS.name]
    assert {k: v for k, v in stripped["tasks"][QRELS.name].items()} == {k: v for k, v in report["tasks"][QRELS.name].items() if k != "per_query"}
    envelope = _resign(stripped, signed["key"], tmp_path / "stripped")
    assert verify_report_file(envelope, load_public_key(signed["pub"])).report == stripped


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, "1.5 is not within [0, 1]"),
        (-0.0001, "-0.0001 is not within [0, 1]"),
        ("0.5", "is not a number"),
        (True, "is not a number"),
        (None, "is not a number"),
    ],
)
def test_per_query_values_are_checked_like_the_schema_says(signed: dict[str, Path], value: object, message: str) -> None:
    import jsonschema

    from grader.reports.model import schema_violation
    from grader.schemas import load_schema

    report = json.loads(json.dumps(verify_report_file(signed["bm25"], load_public_key(signed["pub"])).report))
    values = report["tasks"][QRELS.name]["per_query"]["values"]
    query = sorted(values)[3]
    values[query] = value
    violation = schema_violation(report)
    assert violation is not None and violation.pointer == f"/tasks/{QRELS.name}/per_query/values/{query}" and violation.message == message
    # The fast check agrees with the schema itself.
    assert list(jsonschema.Draft202012Validator(load_schema("report")).iter_errors(report))
