"""``grader run --dedup-aware LINT.json``: dedup-aware values printed beside the official ones, the report unchanged.

A lookup-table model ranks a planted exact copy (d5, the same text as d1) above the relevant d1: equal
vectors tie, and trec order puts the larger id first. Worked out by hand: officially qa's NDCG@10 is
1/log2(3) (d1 at rank 2), dedup-aware 1 (the copy at rank 1 stands for d1); qb (d2 first) is 1 both ways.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.cli_support import invoke
from tests.conftest import write_task
from tests.onnx_models import embedding_table, onnx_submission


def _bench(root: Path, copy_text: str = "w11") -> Path:
    texts = ["w11", "w20", "w31", "w40", copy_text]
    corpus = [{"_id": f"d{n}", "title": "", "text": text} for n, text in enumerate(texts, start=1)]
    queries = [{"_id": "qa", "text": "w11"}, {"_id": "qb", "text": "w20"}]
    write_task(root / "t", corpus=corpus, queries=queries, qrels={"test": [("qa", "d1", 1), ("qb", "d2", 1)]})
    spec = {"name": "tiny", "version": "1", "primary_measure": "NDCG@10", "measures": ["NDCG@10", "MRR@10"], "tasks": ["t"]}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def _values(stdout: str) -> dict[str, float]:
    tail = stdout.split("dedup-aware, task t (docs/lint.md; 1 duplicate clusters; not the official numbers):\n", 1)[1]
    return {name: float(value) for name, value in re.findall(r"^(NDCG@10|MRR@10)\s+([0-9.]+)$", tail, flags=re.M)}


@pytest.mark.slow
def test_dedup_aware_values_beside_an_unchanged_report(tmp_path: Path) -> None:
    bench = _bench(tmp_path / "tiny")
    submission = onnx_submission(tmp_path / "model", table=embedding_table(dim=8, seed=2))
    invoke("lint", bench, "--out", tmp_path / "lint.json")
    out = tmp_path / "out"
    args = ["run", submission, "--benchmark", bench, "--sandbox", "none", "--threads", "1", "--quiet", "--out", out]
    plain = invoke(*args)
    # Graded again into the same folder: the stored result is not reused, as the run is needed.
    result = invoke(*args, "--dedup-aware", tmp_path / "lint.json")
    assert result.stdout.startswith(plain.stdout)
    official = (1 / math.log2(3) + 1) / 2
    assert _values(result.stdout) == {"NDCG@10": pytest.approx(1.0, abs=1e-6), "MRR@10": pytest.approx(1.0, abs=1e-6)}
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["tasks"]["t"]["measures"] == {"NDCG@10": pytest.approx(official, abs=1e-15), "MRR@10": 0.75}
    assert "dedup" not in (out / "report.json").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_lint_report_of_other_data_is_refused(tmp_path: Path) -> None:
    invoke("lint", _bench(tmp_path / "other", copy_text="w41"), "--out", tmp_path / "lint.json")
    bench = _bench(tmp_path / "tiny")
    submission = onnx_submission(tmp_path / "model", table=embedding_table(dim=8, seed=2))
    args = ["run", submission, "--benchmark", bench, "--sandbox", "none", "--quiet", "--out", tmp_path / "out"]
    result = invoke(*args, "--dedup-aware", tmp_path / "lint.json", expect=2)
    assert result.stderr.startswith(f"error: {tmp_path / 'lint.json'}: tasks: task 't': the lint report is of other data (data_digest ")
    assert not (tmp_path / "out").exists()


def test_a_lint_report_is_read_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.errors import InputError
    from grader.integrity import dedup_measures

    monkeypatch.setattr(dedup_measures, "MAX_LINT_REPORT_BYTES", 100)
    big = tmp_path / "lint.json"
    big.write_text(json.dumps({"tasks": [], "pad": "x" * 200}), encoding="utf-8")
    with pytest.raises(InputError, match=r"lint\.json: larger than 100 bytes"):
        dedup_measures.load_lint_report(big)
