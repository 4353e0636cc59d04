"""`grader compare` on training settings and public-part reports; `grader verify` on the part and the worker.

Real signed reports of `grader score` (BM25 runs of mini/text2code), relabelled
and signed again as a competition server labels them: ``labels.training``
(the manifest's setting), ``labels.part`` (a public-part report before the end)
and ``labels.graded_by`` (a remote worker).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader.reports.keys import load_public_key
from grader.reports.signing import write_signed_report
from grader.reports.verify import verify_report_file
from tests.cli_support import invoke

pytestmark = pytest.mark.slow  # the fixture runs the BM25 baseline script in a subprocess

ROOT = Path(__file__).resolve().parent.parent
MINI_TASK = ROOT / "grader" / "bundled" / "mini" / "text2code"
QRELS = MINI_TASK / "qrels" / "test.tsv"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("labels")
    assert invoke("keygen", "--out", root / "keys").exit_code == 0
    run = root / "bm25.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bm25_baseline.py"), str(MINI_TASK), "--split", "test", "--out", str(run)],
        check=True,
        capture_output=True,
    )
    short = root / "bm25-top3.jsonl"
    short.write_text("".join(json.dumps({**row, "hits": row["hits"][:3]}) + "\n" for row in map(json.loads, run.read_text().splitlines())))
    found: dict[str, Any] = {"key": root / "keys" / "grader.key", "pub": root / "keys" / "grader.pub", "root": root}
    for name, path in (("long", run), ("short", short)):
        out = root / name / "report.dsse.json"
        result = invoke("score", "--qrels", QRELS, "--run", path, "--measure", "NDCG@10", "--out", out, "--sign", found["key"])
        assert result.exit_code == 0, result.output
        found[name] = verify_report_file(out, load_public_key(found["pub"])).report
    return found


def relabelled(reports: dict[str, Any], which: str, name: str, labels: dict[str, Any], *, drop_per_query: bool = False) -> Path:
    report = json.loads(json.dumps(reports[which]))
    report["labels"] = {**report.get("labels", {}), **labels}
    if drop_per_query:
        for task in report["tasks"].values():
            task.pop("per_query", None)
    envelope, _ = write_signed_report(report, reports["key"], reports["root"] / name / "report.dsse.json")
    return Path(envelope)


ZERO = {"training": {"setting": "zero-shot", "datasets": []}}
TUNED = {"training": {"setting": "fine-tuned", "datasets": ["mini/train"]}}


def test_compare_refuses_mixed_training_settings_unless_asked(reports: dict[str, Any]) -> None:
    zero = relabelled(reports, "long", "zero", ZERO)
    tuned = relabelled(reports, "short", "tuned", TUNED)
    refused = invoke("compare", zero, tuned, "--key", reports["pub"], expect=2)
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"error: the reports declare different training settings (fine-tuned: {tuned}; zero-shot: {zero}); the boards never rank them together",
        "hint: compare each setting's reports apart, or pass --mixed-settings to rank them together anyway",
    ]
    mixed = invoke("compare", zero, tuned, "--key", reports["pub"], "--mixed-settings")
    assert mixed.exit_code == 0, mixed.output
    assert mixed.stdout.splitlines()[0].endswith("; every report verified; training settings mixed (--mixed-settings)")
    same = invoke("compare", zero, relabelled(reports, "short", "zero-short", ZERO), "--key", reports["pub"], "--json")
    assert same.exit_code == 0, same.output
    assert [r["training_setting"] for r in json.loads(same.stdout)["reports"]] == ["zero-shot", "zero-shot"]
    # undeclared is a setting of its own, as on the boards
    undeclared = relabelled(reports, "short", "undeclared", {})
    assert invoke("compare", zero, undeclared, "--key", reports["pub"], expect=2).exit_code == 2


PART = {"part": {"name": "public", "fraction": 0.3, "partition_commitment": "sha256:" + "ab" * 32, "note": "scores over the public queries only"}}


def test_compare_says_what_a_public_part_report_is(reports: dict[str, Any]) -> None:
    public = relabelled(reports, "short", "public", {**PART, **TUNED}, drop_per_query=True)
    full = relabelled(reports, "long", "full", TUNED)
    result = invoke("compare", full, public, "--key", reports["pub"], expect=2)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {public}: a public-part report (scores over the public queries only, without per-query values, by design: "
        "a competition server gives these out until the end)",
        "hint: compare the full reports, which participants download after the end (grader status ID --report FILE)",
    ]
    assert "older grader" not in result.stderr


def test_verify_names_the_part_and_the_worker(reports: dict[str, Any]) -> None:
    public = relabelled(reports, "short", "public-w", {**PART, "graded_by": {"worker": "w2", "attempt": 1}}, drop_per_query=True)
    lines = invoke("verify", public, "--key", reports["pub"]).stdout.splitlines()
    assert (
        "part: public: 30% of the queries of the graded split (qrels), chosen by the partition committed as sha256:" + "ab" * 32
        + "; no per-query values (the full report is published at the end)"
    ) in lines  # fmt: skip
    assert "graded by: worker w2 (attempt 1), named by the signer" in lines
    plain = invoke("verify", relabelled(reports, "long", "plain", {}), "--key", reports["pub"]).stdout.splitlines()
    assert "part: all queries of the graded split (qrels): a full report" in plain
    assert "graded by: the signer's own machine (no remote worker named)" in plain
