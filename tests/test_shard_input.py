"""A shard job reads its shard from a worker copy alone: the sidecar's slice and its own lines, verified.

The expected shards are derived here independently of :func:`grader.retrieval.shards.plan_shards`:
documents sorted by (text as the encoder sees it, pseudonym) with Python's ``sorted``, cut every
``ceil(shard_documents / chunk) * chunk`` documents, each document's rank its pseudonym's place in
``sorted`` of all pseudonyms. The memory test weighs (tracemalloc's peak, per byte of the shard's
texts) reading one shard of a corpus of N and of 10 N documents: it must not grow with N (reading
the whole corpus, as a plain folder is read, grows about 10 x: bench/results/shard_input.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import shutil
import sys
import tracemalloc
from pathlib import Path
from types import ModuleType

import pytest

from grader import jsonio
from grader.data.benchmark import load_benchmark_folder
from grader.data.registry import resolve_benchmark
from grader.data.task import Document, Query, Task, document_text
from grader.errors import TaskFailure, UsageError
from grader.failures import FailureCode
from grader.grading.shard_input import read_shard, shard_total
from grader.hosting.protocol.worker_data import FORMAT, MANIFEST, ensure_worker_data, export_worker_data
from grader.retrieval.corpus_order import FILE, HEADER
from grader.sandbox.blinding import BlindingKey
from tests.sandbox_support import write_beir_task

KEY = BlindingKey(hashlib.sha256(b"tests/test_shard_input.py").digest())
CHUNK = 4
N = 53  # 53 = 4 * 13 + 1: no shard size below divides it


def _corpus() -> list[Document]:
    """Equal texts under different ids (some equal only once title and text are joined), non-ASCII, empty titles."""
    documents = []
    for n in range(N):
        if n % 5 == 0:
            documents.append(Document(f"doc-{n}", "", "same text"))  # equal texts: only the pseudonyms order them
        elif n % 7 == 0:
            documents.append(Document(f"doc-{n}", "same", "text"))  # "same text" once joined
        else:
            documents.append(Document(f"doc-{n}", f"Zürich {n % 3}", f"naïve 数据 {n * 7919 % 97} \u00e9\U0001f600"))
    return documents


def _benchmark(root: Path, documents: list[Document]) -> Path:
    queries = [Query("q-1", "same"), Query("q-2", "zürich")]
    write_beir_task(root / "t", documents=documents, queries=queries, qrels={"q-1": {documents[0].id: 1}}, splits=("test",))
    spec = {"name": "order", "version": "1", "primary_measure": "MRR@10", "measures": ["MRR@10"], "tasks": ["t"]}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("order")
    out = root / "copy"
    export_worker_data(load_benchmark_folder(_benchmark(root / "bench", _corpus())), ["t"], ["test"], KEY, out)
    return out


def _fresh_copy(copy: Path, tmp_path: Path) -> Task:
    shutil.copytree(copy, tmp_path / "copy")
    return load_benchmark_folder(tmp_path / "copy").task("t")


def _expected(task: Task, shard_documents: int | None) -> list[tuple[list[Document], list[int]]]:
    documents = list(task.iter_corpus())
    ordered = sorted(documents, key=lambda d: (document_text(d.title, d.text), d.id))
    rank = {doc_id: place for place, doc_id in enumerate(sorted(d.id for d in documents))}
    step = len(ordered) if shard_documents is None else math.ceil(shard_documents / CHUNK) * CHUNK
    cuts = [ordered[begin : begin + step] for begin in range(0, len(ordered), step)]
    return [(cut, [rank[d.id] for d in cut]) for cut in cuts]


@pytest.mark.parametrize("shard_documents", [1, 5, 12, 50, 1000, None])
def test_every_shard_of_a_copy_is_the_plans(copy: Path, shard_documents: int | None) -> None:
    task = load_benchmark_folder(copy).task("t")
    expected = _expected(task, shard_documents)
    assert shard_total(task, chunk_size=CHUNK, shard_documents=shard_documents) == len(expected)
    for number, (documents, ranks) in enumerate(expected):
        shard = read_shard(task, number, chunk_size=CHUNK, shard_documents=shard_documents)
        assert shard.documents == documents
        assert shard.ranks.tolist() == ranks
        assert shard.corpus_size == N
    with pytest.raises(UsageError, match="there is no shard"):
        read_shard(task, len(expected), chunk_size=CHUNK, shard_documents=shard_documents)


def test_equal_texts_are_ordered_by_pseudonym_and_the_plain_folder_agrees(copy: Path, tmp_path: Path) -> None:
    task = load_benchmark_folder(copy).task("t")
    whole = read_shard(task, 0, chunk_size=CHUNK, shard_documents=None)
    same = [d.id for d in whole.documents if document_text(d.title, d.text) == "same text"]
    assert len(same) == 11 + 6 and same == sorted(same)  # n % 5 == 0: 11 of them; n % 7 == 0 but not n % 5: 6
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(copy / "t" / "corpus.jsonl", plain / "corpus.jsonl")
    shutil.copy(copy / "t" / "queries.jsonl", plain / "queries.jsonl")
    no_sidecar = Task(plain, "t")  # a plain folder: read whole and planned in memory
    for number in range(shard_total(task, chunk_size=CHUNK, shard_documents=12)):
        a = read_shard(task, number, chunk_size=CHUNK, shard_documents=12)
        b = read_shard(no_sidecar, number, chunk_size=CHUNK, shard_documents=12)
        assert a.documents == b.documents and a.ranks.tolist() == b.ranks.tolist() and a.corpus_size == b.corpus_size


def _refused(task: Task, shard_documents: int | None = None) -> TaskFailure:
    with pytest.raises(TaskFailure) as caught:
        for number in range(math.ceil(N / (shard_documents or N))):
            read_shard(task, number, chunk_size=CHUNK, shard_documents=shard_documents)
    assert caught.value.code is FailureCode.INFRA
    return caught.value


def test_a_tampered_sidecar_is_refused(copy: Path, tmp_path: Path) -> None:
    task = _fresh_copy(copy, tmp_path)
    sidecar = task.root / FILE
    data = sidecar.read_bytes()
    first, second = (data[HEADER.size + 24 * n : HEADER.size + 24 * (n + 1)] for n in (0, 1))
    sidecar.write_bytes(data[: HEADER.size] + second + first + data[HEADER.size + 48 :])  # the first two positions swapped
    assert "sha256" in str(_refused(task))
    with pytest.raises(TaskFailure, match="sha256"):
        shard_total(task, chunk_size=CHUNK, shard_documents=12)
    # The manifest made to agree: the order itself is then found wrong.
    manifest = task.root.parent / MANIFEST
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["orders"]["t"]["sha256"] = hashlib.sha256(sidecar.read_bytes()).hexdigest()
    manifest.write_text(json.dumps(data), encoding="utf-8")
    assert "strictly increasing (text, id) order" in str(_refused(task))


def test_a_reordered_corpus_line_is_refused(copy: Path, tmp_path: Path) -> None:
    task = _fresh_copy(copy, tmp_path)
    lines = task.corpus_path.read_bytes().splitlines(keepends=True)
    lines[3], lines[4] = lines[4], lines[3]
    task.corpus_path.write_bytes(b"".join(lines))
    assert "is not the line the corpus order recorded" in str(_refused(task, 12))


def test_a_copy_without_its_manifest_order_is_refused(copy: Path, tmp_path: Path) -> None:
    task = _fresh_copy(copy, tmp_path)
    manifest = task.root.parent / MANIFEST
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["orders"]["t"]["documents"] = N + 1
    manifest.write_text(json.dumps(data), encoding="utf-8")
    assert "count" in str(_refused(task))


def test_an_old_format_copy_is_exported_again(tmp_path: Path) -> None:
    bench = _benchmark(tmp_path / "bench", _corpus())
    out = ensure_worker_data(str(bench), ["t"], ["test"], KEY, tmp_path / "copy")
    manifest = jsonio.load_file(out / MANIFEST)
    assert manifest["format"] == FORMAT == 2 and manifest["orders"]["t"]["documents"] == N
    old = {key: value for key, value in manifest.items() if key != "orders"} | {"format": 1}
    (out / MANIFEST).write_text(json.dumps(old), encoding="utf-8")
    (out / "t" / FILE).unlink()
    ensure_worker_data(str(bench), ["t"], ["test"], KEY, out)
    assert jsonio.load_file(out / MANIFEST) == manifest and (out / "t" / FILE).is_file()
    assert ensure_worker_data(str(bench), ["t"], ["test"], KEY, out) == out  # current now: kept


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    script = Path(__file__).resolve().parents[1] / "bench" / "synthetic_corpus.py"
    spec = importlib.util.spec_from_file_location("synthetic_corpus_for_shard_input", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _peak_per_shard_byte(generator: ModuleType, root: Path, documents: int) -> float:
    bench = resolve_benchmark(str(generator.generate(root / "bench", documents, 20, seed=5)))
    export_worker_data(bench, ["synthetic"], ["test"], KEY, root / "copy")
    task = load_benchmark_folder(root / "copy").task("synthetic")
    tracemalloc.start()
    try:
        shard = read_shard(task, 1, chunk_size=64, shard_documents=512)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(shard.documents) == 512 and shard.corpus_size == documents
    # Per byte of the shard's texts: two corpora's shards differ in length (a few %), not in what a byte costs.
    return peak / sum(len(document_text(d.title, d.text).encode()) for d in shard.documents)


def test_reading_one_shard_holds_the_shard_not_the_corpus(generator: ModuleType, tmp_path: Path) -> None:
    small = _peak_per_shard_byte(generator, tmp_path / "small", 2_000)
    large = _peak_per_shard_byte(generator, tmp_path / "large", 20_000)
    print(f"tracemalloc peak of one 512-document shard per byte of its texts: {small:.3f} at 2,000 documents, {large:.3f} at 20,000")
    assert abs(large - small) < 0.1 * small, (small, large)
