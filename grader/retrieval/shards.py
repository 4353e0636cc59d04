"""The canonical encoding order and the shard plan of a corpus.

The grader's encoder visits texts in one canonical order, a function of the
(text, id) pairs alone: sorted by text, equal texts by id (code point order, the
same as UTF-8 byte order). It cuts that order into chunks of ``chunk_size`` and
forms its batches inside each chunk (``grader/retrieval/encoder.py``), so a
vector depends only on its chunk.

A shard is a run of whole chunks of that order. Encoding a shard's texts alone
therefore forms exactly the batches that encoding the whole corpus forms, and
gives the same vectors bit for bit, even for a model whose output depends on
its batch. The boundaries depend only on the corpus and ``shard_documents``
(rounded up to whole chunks), never on how many workers there are
(``docs/search.md``, "Shards").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from grader.errors import UsageError


def canonical_order(texts: Sequence[str], ids: Sequence[str] | None = None) -> np.ndarray:
    """Positions of ``texts`` sorted by (text, id): the order the encoder visits them in.

    Python compares ``str`` by code point, the same order as their UTF-8 bytes.
    Ids are unique within a corpus, so with ids the order is total and equal texts
    never order by their place in the file. Without ids, equal texts keep their
    input order (they are then interchangeable only for a batch-invariant model).
    """
    if ids is None:
        return np.asarray(sorted(range(len(texts)), key=texts.__getitem__), dtype=np.int64)
    if len(ids) != len(texts):
        raise UsageError(f"{len(texts)} texts but {len(ids)} ids")
    return np.asarray(sorted(range(len(texts)), key=lambda row: (texts[row], ids[row])), dtype=np.int64)


@dataclass(frozen=True)
class Shard:
    """One shard: canonical positions ``begin:end`` (whole chunks), i.e. input rows ``rows``."""

    number: int
    begin: int
    end: int
    rows: np.ndarray  # input positions of the shard's texts, in canonical order

    @property
    def size(self) -> int:
        return self.end - self.begin


def chunks_per_shard(shard_documents: int | None, chunk_size: int) -> int | None:
    """``shard_documents`` rounded up to whole chunks, in chunks; ``None``: no sharding."""
    if chunk_size < 1:
        raise UsageError(f"chunk size must be positive, not {chunk_size}")
    if shard_documents is None:
        return None
    if shard_documents < 1:
        raise UsageError(f"shard_documents must be positive, not {shard_documents}")
    return math.ceil(shard_documents / chunk_size)


def plan_shards(texts: Sequence[str], ids: Sequence[str], *, chunk_size: int, shard_documents: int | None) -> list[Shard]:
    """Cut the corpus into shards of whole encoding chunks in canonical order.

    A pure function of the (text, id) pairs, ``chunk_size`` and ``shard_documents``
    (``None``: one shard). Every shard but the last holds
    ``ceil(shard_documents / chunk_size) * chunk_size`` documents. An empty corpus
    has no shards.
    """
    order = canonical_order(texts, ids)
    chunks = chunks_per_shard(shard_documents, chunk_size)
    step = len(order) if chunks is None else chunks * chunk_size
    return [
        Shard(number, begin, min(begin + step, len(order)), order[begin : begin + step])
        for number, begin in enumerate(range(0, len(order), max(step, 1)))
    ]
