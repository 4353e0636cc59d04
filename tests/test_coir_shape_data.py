"""bench/coir_shape_data.py: a synthetic benchmark with CoIR's shape that the grader loads and lints clean, deterministic for a seed."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from grader.data.describe import describe
from grader.data.registry import resolve_benchmark
from grader.integrity.lint import LintSettings
from grader.integrity.report import lint_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "coir_shape_data.py"
SCALE = 0.001
# What a first line of each CodeSearchNet language's code looks like (the seed snippets' headers).
HEADERS = {"go": "func ", "java": "public static ", "javascript": "function ", "php": "public function ", "python": "def ", "ruby": "def "}


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    """bench/coir_shape_data.py, imported as its sibling scripts import it (bench/ is not a package)."""
    if str(SCRIPT.parent) not in sys.path:
        sys.path.append(str(SCRIPT.parent))  # last: a bench script never shadows another module
    return importlib.import_module(SCRIPT.stem)


@pytest.fixture(scope="module")
def generated(generator: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generator.generate(tmp_path_factory.mktemp("coir-shape") / "bench", SCALE, seed=3)


def files(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_coir_shape_counts_groups_and_languages(generator: ModuleType, generated: Path) -> None:
    """Every CoIR task of the bundled description, with its counts times the scale, CoIR's groups, the six languages' code."""
    coir = json.loads((Path(__file__).resolve().parents[1] / "grader" / "bundled" / "coir" / "benchmark.json").read_text(encoding="utf-8"))
    benchmark = resolve_benchmark(str(generated))
    assert benchmark.name == "coir-shape-synthetic"
    assert benchmark.spec.task_info["synthetic-text2sql"]["language"] == "sql" and benchmark.spec.task_info["apps"]["language"] == "python"
    assert benchmark.spec.tasks == tuple(coir["tasks"]) and len(coir["tasks"]) == 20
    assert {name: list(members) for name, members in benchmark.spec.groups.items()} == coir["groups"]
    described = describe(str(generated))["tasks"]
    for task in coir["tasks"]:
        sizes = coir["task_info"][task]["sizes"]
        documents, queries = max(2, round(sizes["corpus"] * SCALE)), max(2, round(sizes["queries"] * SCALE))
        splits = described[task]["splits"]
        assert sum(1 for _ in benchmark.task(task).iter_corpus()) == documents, task
        assert splits["dev"]["queries"] + splits["test"]["queries"] == min(documents, queries), task
        assert splits["dev"]["queries"] >= 1 and splits["test"]["queries"] >= 1, task
    # the proportions at the largest corpora: python 280,652 : go 182,735 within rounding
    python = sum(1 for _ in benchmark.task("CodeSearchNet-python").iter_corpus())
    go = sum(1 for _ in benchmark.task("CodeSearchNet-go").iter_corpus())
    assert (python, go) == (281, 183)
    for language, header in HEADERS.items():
        info = benchmark.spec.task_info[f"CodeSearchNet-{language}"]
        assert info["language"] == language and info["kind"] == "code-to-text"
        queries = list(benchmark.task(f"CodeSearchNet-{language}").iter_queries())  # code-to-text: the queries are the code
        assert all(query.text.startswith(header) for query in queries), language
        documents = list(benchmark.task(f"CodeSearchNet-ccr-{language}").iter_corpus())
        assert all(document.text.startswith(header) for document in documents), language


def test_lengths_follow_each_task_and_queries_name_their_document(generator: ModuleType, generated: Path) -> None:
    """Mean lengths near each task's stated means (long tasks long, short short) and each query made of its document's identifiers."""
    benchmark = resolve_benchmark(str(generated))
    for task in ("codefeedback-mt", "CodeSearchNet-python", "apps"):
        _kind, doc_style, query_style = generator.MEANS[task]
        texts = [d.text for d in benchmark.task(task).iter_corpus()]
        assert 0.6 * doc_style.mean_chars < sum(map(len, texts)) / len(texts) < 1.6 * doc_style.mean_chars, task
        queries = [q.text for q in benchmark.task(task).iter_queries()]
        assert 0.5 * query_style.mean_chars < sum(map(len, queries)) / len(queries) < 2.0 * query_style.mean_chars, task
    task = benchmark.task("CodeSearchNet-ccr-java")
    corpus = {d.id: d.text for d in task.iter_corpus()}
    judged = {**task.qrels("dev").as_dict(), **task.qrels("test").as_dict()}
    for query in task.iter_queries():
        (relevant,) = judged[query.id]
        name = query.text.split("(")[0].split()[-1]  # the function's name in the query's header
        assert name in corpus[relevant], query.id


def test_lint_finds_no_broken_data(generated: Path) -> None:
    """`grader lint`'s checks: no empty text, no dangling judgement, no exact duplicate, no query in both splits."""
    report = lint_benchmark(resolve_benchmark(str(generated)), None, LintSettings(split="test"))
    for task in report["tasks"]:
        for finding in ("empty_texts", "missing_judged_ids", "exact_duplicate_documents", "cross_split_queries", "oversized_texts"):
            assert task["findings"][finding]["count"] == 0, (task["task"], finding)


def test_same_seed_same_bytes_other_seed_other_texts(generator: ModuleType, generated: Path, tmp_path: Path) -> None:
    again = files(generator.generate(tmp_path / "again", SCALE, seed=3))
    assert again == files(generated)
    other = files(generator.generate(tmp_path / "other", SCALE, seed=4))
    assert other.keys() == again.keys() and other["apps/corpus.jsonl.gz"] != again["apps/corpus.jsonl.gz"]


def test_refuses_bad_scale_and_an_existing_folder_writing_nothing(generator: ModuleType, generated: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scale must be in"):
        generator.generate(tmp_path / "zero", 0.0)
    before = files(generated)
    with pytest.raises(ValueError, match="exists already"):
        generator.generate(generated, SCALE, seed=9)
    assert files(generated) == before and list(tmp_path.iterdir()) == []
