"""What one shard job of a task reads: its documents, in canonical encoding order, and their places in the whole corpus.

A shard is a run of whole encoding chunks of the corpus's canonical (text, id) order
(:func:`grader.retrieval.shards.plan_shards`). A shard job stages only its shard's
documents for the runner container, and names each document it ranks by its index in the
byte order of *all* the corpus's ids (the index space of a compact run,
:mod:`grader.runs.compact`), so the server can merge the shards' lists without their ids.

This is the one place that reads a shard out of a task: callers never load the
whole corpus themselves. In a worker copy (:mod:`grader.hosting.protocol.worker_data`) the task folder
has the corpus's canonical order as a sidecar (:mod:`grader.retrieval.corpus_order`): a shard
job then reads the sidecar's slice for its shard and seeks to just its lines, so its memory
grows with the shard, not with the corpus; what it reads is verified (the sidecar against the
copy's manifest, each line against the sidecar, the shard's order and ids), and a mismatch is
the platform's fault (:class:`TaskFailure` ``INFRA``). A plain benchmark folder (no sidecar)
is read whole and planned in memory.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from grader import jsonio
from grader.data.task import Document, Task, document_text
from grader.errors import GraderError, UsageError
from grader.retrieval import corpus_order
from grader.retrieval.shards import chunks_per_shard, plan_shards
from grader.runs.ordering import byte_order_ranks
from grader.sandbox.blinding import DOCUMENT, PSEUDONYM_HEX

_lock = threading.Lock()
#: Sidecars whose digest matched their manifest, by (path, device, inode, size, mtime): verified once per process.
_verified: set[tuple[str, int, int, int, int]] = set()
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class ShardInput:
    """One shard's documents and where they sit in the whole corpus."""

    #: the shard's documents, in canonical (text, id) order: the order the encoder visits them in
    documents: list[Document]
    #: int64, per document: its index in the byte order of all the corpus's ids
    ranks: np.ndarray
    #: how many documents the whole corpus has
    corpus_size: int


def _plan(task: Task, *, chunk_size: int, shard_documents: int | None) -> tuple[list[Document], list]:
    documents = list(task.iter_corpus())
    texts = [document_text(d.title, d.text) for d in documents]
    return documents, plan_shards(texts, [d.id for d in documents], chunk_size=chunk_size, shard_documents=shard_documents)


_infra = corpus_order.damaged


def _manifest_entry(task: Task, sidecar: Path) -> tuple[str, int]:
    """The sidecar's sha256 and document count as the copy's manifest records them."""
    manifest = task.root.parent / corpus_order.COPY_MANIFEST
    try:
        entry: Any = jsonio.load_file(manifest, max_bytes=1 << 20)["orders"][task.root.name]
        sha256, documents = entry["sha256"], entry["documents"]
    except (OSError, ValueError, KeyError, TypeError, GraderError):
        raise _infra(sidecar, f"{manifest} records no order for task {task.root.name}") from None
    if not isinstance(sha256, str) or type(documents) is not int or documents < 0:
        raise _infra(sidecar, f"{manifest}: the order of task {task.root.name} is malformed")
    return sha256, documents


def _copy_order(task: Task) -> tuple[Path, int] | None:
    """The task's verified sidecar and its document count; ``None`` when the folder has none (no worker copy)."""
    sidecar = task.root / corpus_order.FILE
    if not sidecar.exists():
        return None
    sha256, documents = _manifest_entry(task, sidecar)
    try:
        stat = os.stat(sidecar)
    except OSError as exc:
        raise _infra(sidecar, f"unreadable ({exc.strerror})") from None
    ident = (str(sidecar.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _lock:
        known = ident in _verified
    if not known:
        if corpus_order.file_sha256(sidecar) != sha256:
            raise _infra(sidecar, "its sha256 is not the one the manifest records")
        with _lock:
            _verified.add(ident)
    if corpus_order.read_count(sidecar) != documents:
        raise _infra(sidecar, f"its count is not the manifest's {documents} documents")
    if task.corpus_path.name != "corpus.jsonl":
        raise _infra(task.corpus_path, "a worker copy's corpus is plain corpus.jsonl")
    return sidecar, documents


def _step(documents: int, chunk_size: int, shard_documents: int | None) -> int:
    """Documents per shard, as :func:`grader.retrieval.shards.plan_shards` cuts them (at least 1)."""
    chunks = chunks_per_shard(shard_documents, chunk_size)
    return max(documents if chunks is None else chunks * chunk_size, 1)


def corpus_size(task: Task) -> int:
    """How many documents the task's corpus has: in a worker copy, the manifest's verified count (the corpus is not read)."""
    order = _copy_order(task)
    return sum(1 for _ in task.iter_corpus()) if order is None else order[1]


def shard_total(task: Task, *, chunk_size: int, shard_documents: int | None) -> int:
    """How many shards the task's corpus is cut into (a function of the corpus and the setting only).

    In a worker copy, from the manifest's count (the corpus is not read).
    """
    order = _copy_order(task)
    if order is None:
        return len(_plan(task, chunk_size=chunk_size, shard_documents=shard_documents)[1])
    documents = order[1]
    return -(-documents // _step(documents, chunk_size, shard_documents))


def _document(path: Path, line_number: int, line: bytes) -> Document:
    """One copy line as :meth:`grader.data.task.Task.iter_corpus` reads it, its id a document pseudonym; INFRA otherwise."""
    where = f"line {line_number + 1}"
    try:
        record = jsonio.loads(line)
    except (ValueError, GraderError):
        raise _infra(path, f"{where} is not a JSON object") from None
    if not isinstance(record, dict):
        raise _infra(path, f"{where} is not a JSON object")
    doc_id, title, text = record.get("_id"), record.get("title", ""), record.get("text")
    if not isinstance(doc_id, str) or len(doc_id) != 1 + PSEUDONYM_HEX or doc_id[0] != DOCUMENT or not _HEX.issuperset(doc_id[1:]):
        raise _infra(path, f"{where}: _id is not a document pseudonym")
    title = "" if title is None else title
    if not isinstance(title, str) or not isinstance(text, str):
        raise _infra(path, f"{where}: title and text must be strings")
    return Document(doc_id, title, text)


def _read_copy_shard(task: Task, sidecar: Path, size: int, begin: int, end: int) -> ShardInput:
    """The documents at canonical positions ``begin:end`` of a worker copy of ``size`` documents, verified."""
    entries = corpus_order.read_entries(sidecar, begin, end)
    lines = corpus_order.read_lines(task.corpus_path, entries)
    line_numbers = entries["line"].tolist()
    if line_numbers and max(line_numbers) >= size:
        raise _infra(sidecar, f"positions {begin}:{end} name a line past the corpus's {size}")
    documents = [_document(task.corpus_path, number, line) for number, line in zip(line_numbers, lines)]
    keys = [(document_text(d.title, d.text), d.id) for d in documents]
    if any(before >= after for before, after in pairwise(keys)):
        raise _infra(sidecar, f"positions {begin}:{end} are not in strictly increasing (text, id) order")
    # The corpus is sorted by id, so a later line has a larger id: a line number is the id's byte-order rank.
    by_line = sorted(zip(line_numbers, (d.id for d in documents)))
    if any(a[0] >= b[0] or a[1] >= b[1] for a, b in pairwise(by_line)):
        raise _infra(task.corpus_path, f"the lines of positions {begin}:{end} are not sorted by id")
    return ShardInput(documents, entries["line"].astype(np.int64), size)


def read_shard(task: Task, number: int, *, chunk_size: int, shard_documents: int | None) -> ShardInput:
    """Shard ``number`` of the task's corpus; :class:`UsageError` when there is no such shard.

    In a worker copy, only the shard's slice of the sidecar and its own lines are read.
    """
    order = _copy_order(task)
    if order is not None:
        sidecar, size = order
        step = _step(size, chunk_size, shard_documents)
        total = -(-size // step)
        if not 0 <= number < total:
            raise UsageError(f"task {task.name}: the corpus has {total} shard(s); there is no shard {number}")
        return _read_copy_shard(task, sidecar, size, number * step, min((number + 1) * step, size))
    documents, shards = _plan(task, chunk_size=chunk_size, shard_documents=shard_documents)
    if not 0 <= number < len(shards):
        raise UsageError(f"task {task.name}: the corpus has {len(shards)} shard(s); there is no shard {number}")
    rows = shards[number].rows
    ranks = byte_order_ranks([d.id for d in documents]).astype(np.int64)
    return ShardInput([documents[r] for r in rows.tolist()], ranks[rows], len(documents))
