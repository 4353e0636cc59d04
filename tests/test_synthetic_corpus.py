"""bench/synthetic_corpus.py: the scale benchmark's task is deterministic, valid for the grader's own loader, CoIR-like in length."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from grader.data.registry import resolve_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "synthetic_corpus.py"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("synthetic_corpus_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def files(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_same_seed_same_bytes_other_seed_other_corpus(generator: ModuleType, tmp_path: Path) -> None:
    one = files(generator.generate(tmp_path / "a", 600, 40, seed=7))
    assert one == files(generator.generate(tmp_path / "b", 600, 40, seed=7))
    other = files(generator.generate(tmp_path / "c", 600, 40, seed=8))
    assert other["synthetic/corpus.jsonl.gz"] != one["synthetic/corpus.jsonl.gz"]


def test_the_grader_loads_it_and_lengths_are_appslike(generator: ModuleType, tmp_path: Path) -> None:
    root = generator.generate(tmp_path / "bench", 3000, 100, seed=1)
    benchmark = resolve_benchmark(str(root))
    assert benchmark.spec.tasks == ("synthetic",)
    task = benchmark.task("synthetic")
    documents = list(task.iter_corpus())
    queries = list(task.iter_queries())
    assert len(documents) == 3000 and len(queries) == 100
    lengths = [len(d.text) for d in documents]
    assert min(lengths) >= generator.MIN_CHARS and max(lengths) <= generator.MAX_CHARS
    mean = sum(lengths) / len(lengths)
    assert 0.9 * generator.MEAN_CHARS < mean < 1.1 * generator.MEAN_CHARS, mean  # APPS's 717 characters
    ids = {d.id for d in documents}
    dev, test = task.qrels("dev"), task.qrels("test")
    assert len(dev) == 10 and len(test) == 90  # a tenth public, the rest hidden; every query judged once
    judged = {**dev.as_dict(), **test.as_dict()}
    assert set(judged) == {q.id for q in queries}
    texts = {d.id: d.text for d in documents}
    for query in queries:  # its words come from its one relevant document, so a lexical encoder can find it
        (relevant,) = judged[query.id]
        assert relevant in ids and all(word in texts[relevant] for word in query.text.split())
