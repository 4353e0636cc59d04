"""The BEIR-layout data layer: streaming readers, errors naming file:line, digests, benchmarks."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from grader.data.benchmark import BenchmarkSpec, load_benchmark_folder
from grader.data.qrels import read_qrels
from grader.data.registry import registered_spec, resolve_benchmark
from grader.data.task import Task
from grader.errors import DataError, UsageError
from tests.conftest import write_task


def test_task_streams_corpus_queries_and_qrels(small_task: Path) -> None:
    task = Task(small_task)
    assert [d.id for d in task.iter_corpus()] == ["d1", "d2", "d3"]
    assert [q.id for q in task.iter_queries()] == ["q1", "q2", "q3"]
    assert task.splits() == ["dev", "test"]
    assert dict(task.qrels("test")["q2"]) == {"d2": 2}


def test_gzip_variants_are_read(small_task: Path) -> None:
    corpus = small_task / "corpus.jsonl"
    with gzip.open(small_task / "corpus.jsonl.gz", "wb") as handle:
        handle.write(corpus.read_bytes())
    corpus.unlink()
    assert [d.id for d in Task(small_task).iter_corpus()] == ["d1", "d2", "d3"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "corpus.jsonl:2: invalid JSON"),
        ('{"title": "", "text": "x"}', "corpus.jsonl:2: _id: missing field"),
        ('{"_id": 5, "text": "x"}', "corpus.jsonl:2: _id: expected a string"),
        ('{"_id": "d1", "text": "x"}', "corpus.jsonl:2: _id: duplicate document id 'd1'"),
        ('{"_id": "d9"}', "corpus.jsonl:2: text: missing field"),
        ("[1, 2]", "corpus.jsonl:2: expected a JSON object"),
        ('{"_id": "a\\tb", "text": "x"}', "corpus.jsonl:2: _id: identifier must not contain"),
    ],
)
def test_broken_corpus_line_names_file_line_and_field(tmp_path: Path, line: str, expected: str) -> None:
    root = write_task(tmp_path / "t", corpus=[{"_id": "d1", "text": "x"}], queries=[{"_id": "q", "text": "y"}], qrels={})
    with open(root / "corpus.jsonl", "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    with pytest.raises(DataError) as caught:
        list(Task(root).iter_corpus())
    assert expected in str(caught.value)


def test_qrels_errors_name_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\thigh\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"q.tsv:3: score: relevance must be an integer"):
        read_qrels(path)
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t0\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"q.tsv:3: corpus-id: document 'd1' is judged twice"):
        read_qrels(path)


def test_qrels_formats_agree(tmp_path: Path) -> None:
    expected = {"q1": {"d1": 1, "d2": 0}, "q 2": {"d3": -1}}
    (tmp_path / "a.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq 2\td3\t-1\n", encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(expected), encoding="utf-8")
    (tmp_path / "c.txt").write_text("q1 0 d1 1\nq1 0 d2 0\n", encoding="utf-8")
    assert read_qrels(tmp_path / "a.tsv").as_dict() == expected
    assert read_qrels(tmp_path / "b.json").as_dict() == expected
    assert read_qrels(tmp_path / "c.txt").as_dict() == {"q1": {"d1": 1, "d2": 0}}


def test_split_digest_covers_exactly_the_files_of_the_split(small_task: Path) -> None:
    task = Task(small_task)
    files = {
        name: hashlib.sha256((small_task / name).read_bytes()).hexdigest()
        for name in ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/dev.tsv"]
    }
    assert task.file_digests == files
    listing = "".join(f"{files[name]}  {name}\n" for name in ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
    assert task.split_digest("test") == hashlib.sha256(listing.encode()).hexdigest()
    before_test, before_dev = task.split_digest("test"), task.split_digest("dev")
    (small_task / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n", encoding="utf-8")
    changed = Task(small_task)
    assert changed.split_digest("test") == before_test
    assert changed.split_digest("dev") != before_dev


def test_missing_split_lists_available(small_task: Path) -> None:
    with pytest.raises(DataError, match=r"no split 'train' \(available: dev, test\)"):
        Task(small_task).qrels("train")


def test_benchmark_groups_average_before_the_mean(tmp_path: Path) -> None:
    spec = BenchmarkSpec.from_json(
        {"name": "b", "version": "1", "primary_measure": "NDCG@10", "tasks": ["a", "g1", "g2", "c"], "groups": {"G": ["g1", "g2"]}},
        path=tmp_path / "benchmark.json",
    )
    result = spec.aggregate({"a": 0.2, "g1": 0.1, "g2": 0.5, "c": 0.9})
    assert result["groups"] == {"G": pytest.approx(0.3)}
    assert result["score"] == pytest.approx((0.2 + 0.3 + 0.9) / 3)
    assert result["complete"] is True
    failed = spec.aggregate({"a": 0.2, "g1": None, "g2": 0.5, "c": 0.9})
    assert failed["score"] is None and failed["groups"]["G"] is None
    partial = spec.aggregate({"a": 0.2}, tasks=["a"])
    assert partial["score"] == 0.2 and partial["complete"] is False


def test_benchmark_json_errors_name_the_pointer(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"/groups/G"):
        BenchmarkSpec.from_json(
            {"name": "b", "version": "1", "primary_measure": "NDCG@10", "tasks": ["a"], "groups": {"G": ["zz"]}}, path=tmp_path / "b.json"
        )
    with pytest.raises(DataError, match=r"b.json: /primary_measure"):
        BenchmarkSpec.from_json({"name": "b", "version": "1", "primary_measure": "nDCG10", "tasks": ["a"]}, path=tmp_path / "b.json")


def test_folder_without_benchmark_json_uses_its_task_folders(tmp_path: Path, small_task: Path) -> None:
    benchmark = load_benchmark_folder(small_task.parent)
    assert benchmark.spec.tasks == ("toy",)
    assert benchmark.task("toy").root == small_task


def test_registered_coir_groups_csn_languages() -> None:
    spec = registered_spec("coir")
    units = spec.units()
    assert len(units) == 10
    assert dict(units)["CodeSearchNet"] == tuple(f"CodeSearchNet-{language}" for language in ["go", "java", "javascript", "ruby", "python", "php"])
    assert spec.primary_measure == "NDCG@10"
    assert registered_spec("cat").primary_measure == "MRR@1000"


def test_unknown_benchmark_and_missing_data_are_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="unknown benchmark 'nope'"):
        resolve_benchmark("nope")
    monkeypatch.setenv("GRADER_DATA_DIR", str(tmp_path))
    with pytest.raises(UsageError, match="data of benchmark 'coir' not found") as caught:
        resolve_benchmark("coir")
    assert "import-coir" in (caught.value.hint or "")
