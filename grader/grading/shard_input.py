"""What one shard job of a task reads: its documents, in canonical encoding order, and their places in the whole corpus.

A shard is a run of whole encoding chunks of the corpus's canonical (text, id) order
(:func:`grader.retrieval.shards.plan_shards`). A shard job stages only its shard's
documents for the runner container, and names each document it ranks by its index in the
byte order of *all* the corpus's ids (the index space of a compact run,
:mod:`grader.runs.compact`), so the server can merge the shards' lists without their ids.

This is the one place that reads a shard out of a task (issue 23): callers never load the
whole corpus themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.data.task import Document, Task, document_text
from grader.errors import UsageError
from grader.retrieval.shards import plan_shards
from grader.runs.ordering import byte_order_ranks


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


def shard_total(task: Task, *, chunk_size: int, shard_documents: int | None) -> int:
    """How many shards the task's corpus is cut into (a function of the corpus and the setting only)."""
    return len(_plan(task, chunk_size=chunk_size, shard_documents=shard_documents)[1])


def read_shard(task: Task, number: int, *, chunk_size: int, shard_documents: int | None) -> ShardInput:
    """Shard ``number`` of the task's corpus; :class:`UsageError` when there is no such shard."""
    documents, shards = _plan(task, chunk_size=chunk_size, shard_documents=shard_documents)
    if not 0 <= number < len(shards):
        raise UsageError(f"task {task.name}: the corpus has {len(shards)} shard(s); there is no shard {number}")
    rows = shards[number].rows
    ranks = byte_order_ranks([d.id for d in documents]).astype(np.int64)
    return ShardInput([documents[r] for r in rows.tolist()], ranks[rows], len(documents))
