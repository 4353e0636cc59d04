"""A worker's copy of the benchmark data: corpus and judged queries under pseudonymous ids, no judgements: a worker ranks, the server scores.

Ids can be judgements in disguise (CAT pairs ``q-<n>`` with ``c-<n>``), so workers never
hold the benchmark's own ids. The server, which alone keeps the competition's blinding key
(:mod:`grader.sandbox.blinding`), exports each task's corpus and the queries judged in the
graded splits with every id replaced by its pseudonym, each file in pseudonym order (so a
position says nothing either), and no ``qrels/`` folder. A worker stages that copy as it is
(:class:`grader.sandbox.blinding.Preblinded`); what its containers see is byte for byte what a
direct ``grader run`` under the same key stages. The worker's runs index the copy's canonical
(pseudonym) order; the server maps them back to the real ids before scoring
(:func:`grader.grading.scoring.report_from_runs`).

Layout of OUT (``grader admin export-worker-data --out OUT``; local workers get
``state/worker-data/``, written at every start unless already current)::

    benchmark.json              the benchmark's definition (name, version, tasks, measures)
    worker-data.json            format, the key's scheme and id (never the key), the splits, the source digests
    <task>/corpus.jsonl         {"_id": "d<24 hex>", "title", "text"}, sorted by _id
    <task>/queries.jsonl        {"_id": "q<24 hex>", "text"}, the queries judged in the splits, sorted by _id
    <task>/corpus.order         the corpus's canonical encoding order (:mod:`grader.retrieval.corpus_order`): a shard job
                                reads its shard's lines alone; its sha256 and count are in the manifest's ``orders``
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader import jsonio
from grader.data.benchmark import Benchmark
from grader.data.registry import resolve_benchmark
from grader.data.task import Document, document_text
from grader.errors import GraderError, UsageError
from grader.grading.blinded_documents import keep_blinded_documents
from grader.retrieval import corpus_order
from grader.retrieval.shards import canonical_order
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindedIds, BlindingKey, Preblinded, blind

#: The file that marks a folder as an exported worker copy.
MANIFEST = corpus_order.COPY_MANIFEST
#: 2: each task has its corpus order sidecar (a shard job reads only its shard); a copy of an older format is exported afresh.
FORMAT = 2


@dataclass(frozen=True)
class ExportedTask:
    """What one task's export wrote: how many documents and queries."""

    documents: int
    queries: int
    #: the sha256 of the task's ``corpus.order``
    order_sha256: str = ""


def _spec_json(benchmark: Benchmark, tasks: Sequence[str]) -> dict[str, Any]:
    spec = benchmark.spec
    keep = set(tasks)
    data: dict[str, Any] = {
        "name": spec.name,
        "version": spec.version,
        "primary_measure": spec.primary_measure,
        "default_split": spec.default_split,
        "sample_split": spec.sample_split,
        "tasks": [task for task in spec.tasks if task in keep],
    }
    if spec.measures:
        data["measures"] = list(spec.measures)
    groups = {group: [m for m in members if m in keep] for group, members in spec.groups.items()}
    if any(groups.values()):
        data["groups"] = {group: members for group, members in groups.items() if members}
    return data


@dataclass(frozen=True)
class _Lines:
    """Where :func:`_write_sorted` put each line (per line number): byte offset, length, digest."""

    offsets: np.ndarray
    lengths: np.ndarray
    digests: list[bytes]


def _write_sorted(path: Path, ids: BlindedIds, records: Iterable[dict[str, str]]) -> _Lines:
    """Each record (in the order its id was given to :func:`blind`) under its pseudonym, in pseudonym order; where each line went."""
    listed = list(records)
    by_row = [0] * len(listed)
    for index, row in enumerate(ids.rows.tolist()):
        by_row[row] = index
    offsets = np.zeros(len(listed), dtype=np.uint64)
    lengths = np.zeros(len(listed), dtype=np.uint32)
    digests: list[bytes] = []
    position = 0
    with open(path, "wb") as handle:
        for row, index in enumerate(by_row):
            # Strict UTF-8, as the text-mode write before: the copy is read back as UTF-8.
            line = (jsonio.dumps({"_id": ids.staged[row], **listed[index]}) + "\n").encode("utf-8")
            handle.write(line)
            offsets[row], lengths[row] = position, len(line)
            digests.append(corpus_order.line_digest(line))
            position += len(line)
    return _Lines(offsets, lengths, digests)


def _write_order(folder: Path, ids: BlindedIds, documents: list[Document]) -> str:
    """The task's ``corpus.order``: line numbers (= pseudonym ranks) in canonical (text, pseudonym) order; its sha256."""
    texts = [""] * len(documents)
    for document, row in zip(documents, ids.rows.tolist()):
        texts[row] = document_text(document.title, document.text)
    lines = _write_sorted(folder / "corpus.jsonl", ids, ({"title": d.title, "text": d.text} for d in documents))
    order = canonical_order(texts, ids.staged)
    return corpus_order.write_order(folder / corpus_order.FILE, order, lines.offsets, lines.lengths, lines.digests)


def export_task(
    benchmark: Benchmark, name: str, splits: Sequence[str], key: BlindingKey, folder: Path, kept_documents: Path | None = None
) -> ExportedTask:
    """Write task ``name``'s corpus and the queries judged in ``splits`` under pseudonyms into ``folder`` (no judgements).

    ``kept_documents``: the server's folder where scoring finds each task's documents under the key (they are blinded
    here anyway; :mod:`grader.grading.blinded_documents`). It never goes to a worker: it maps pseudonyms to real ids.
    """
    task = benchmark.task(name)
    judged: set[str] = set()
    for split in splits:
        judged.update(task.qrels(split))  # the job's judged ids are the qrels' query ids (services.jobs)
    documents = list(task.iter_corpus())
    queries = [query for query in task.iter_queries() if query.id in judged]
    doc_ids = blind(key, name, DOCUMENT, [document.id for document in documents])
    query_ids = blind(key, name, QUERY, [query.id for query in queries])
    if kept_documents is not None:
        keep_blinded_documents(task, key, kept_documents, doc_ids)
    folder.mkdir(parents=True, exist_ok=True)
    order_sha256 = _write_order(folder, doc_ids, documents)
    _write_sorted(folder / "queries.jsonl", query_ids, ({"text": q.text} for q in queries))
    return ExportedTask(len(documents), len(queries), order_sha256)


def _manifest(benchmark: Benchmark, tasks: Sequence[str], splits: Sequence[str], key: BlindingKey) -> dict[str, Any]:
    # The source digests make a stale copy (other data, another key) recognisable at the next start.
    sources = {name: {split: benchmark.task(name).split_digest(split) for split in splits} for name in tasks}
    return {"format": FORMAT, "blinding": key.report(), "splits": list(splits), "tasks": list(tasks), "sources": sources}


def export_worker_data(
    benchmark: Benchmark, tasks: Sequence[str], splits: Sequence[str], key: BlindingKey, out: Path, kept_documents: Path | None = None
) -> dict[str, ExportedTask]:
    """Export the worker copy of ``tasks`` (queries judged in ``splits``) into ``out``, a new or empty folder; refuse anything else.

    Written into ``out.tmp-export`` first and renamed: a half-written copy is never left under ``out``. With
    ``kept_documents`` (the server's own export), each task's documents under the key are kept there for scoring, in
    place of what was kept for other data or another key.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder; choose a new one (an export never overwrites)")
    staging = out.with_name(out.name + ".tmp-export")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)  # modes from the umask: private inside the state folder (the server runs under 077)
    if kept_documents is not None:
        shutil.rmtree(kept_documents, ignore_errors=True)  # kept for the data or key the copy being replaced was of
        kept_documents.mkdir(mode=0o700, parents=True)
    written = {name: export_task(benchmark, name, splits, key, staging / name, kept_documents) for name in tasks}
    jsonio.write_json(staging / "benchmark.json", _spec_json(benchmark, tasks), ensure_ascii=True)
    orders = {name: {"file": corpus_order.FILE, "sha256": task.order_sha256, "documents": task.documents} for name, task in written.items()}
    jsonio.write_json(staging / MANIFEST, {**_manifest(benchmark, tasks, splits, key), "orders": orders}, ensure_ascii=True)
    if out.exists():
        out.rmdir()
    os.replace(staging, out)
    return written


def _current(manifest: Any, wanted: dict[str, Any]) -> bool:
    """Whether a copy's manifest is ``wanted`` (what the export records besides: an order per task)."""
    if not isinstance(manifest, dict) or {key: value for key, value in manifest.items() if key != "orders"} != wanted:
        return False
    orders = manifest.get("orders")
    return isinstance(orders, dict) and set(orders) == set(wanted["tasks"])


def ensure_worker_data(
    target: str, tasks: Sequence[str], splits: Sequence[str], key: BlindingKey, out: Path, kept_documents: Path | None = None
) -> Path:
    """``out`` as a current worker copy of benchmark ``target``: kept when its manifest matches, else exported afresh
    (and with it, in ``kept_documents``, each task's documents under the key: :func:`export_worker_data`)."""
    benchmark = resolve_benchmark(target)
    wanted = _manifest(benchmark, tasks, splits, key)
    try:
        current = jsonio.load_file(out / MANIFEST)
    except (OSError, ValueError, GraderError):
        current = None
    if _current(current, wanted):
        return out
    if out.exists():
        shutil.rmtree(out)
    export_worker_data(benchmark, tasks, splits, key, out, kept_documents)
    return out


def copy_key(folder: Path) -> Preblinded:
    """The key a worker copy was made under (its id only), from the copy's manifest; :class:`UsageError` when ``folder`` is no copy."""
    try:
        manifest = jsonio.load_file(folder / MANIFEST)
        blinding = manifest["blinding"]
        key_id = blinding["key_id"]
    except (OSError, ValueError, KeyError, TypeError, GraderError):
        raise UsageError(
            f"{folder} is not a worker data copy (no readable {MANIFEST})", hint="run `grader admin export-worker-data --out DIR` on the server"
        ) from None
    if not isinstance(key_id, str) or len(key_id) != 64:
        raise UsageError(f"{folder / MANIFEST}: blinding.key_id is not a key id")
    return Preblinded(key_id)


def pseudonymous_judged(key: BlindingKey, task: str, judged: Iterable[str]) -> list[str]:
    """The pseudonyms of the judged query ids ``judged`` of ``task``, sorted (what a job names)."""
    return list(blind(key, task, QUERY, list(judged)).staged)
