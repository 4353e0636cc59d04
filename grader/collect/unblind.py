"""Back from pseudonyms to real ids: what a container returned, as the grader scores it.

A container sees each query and document under a pseudonym (:mod:`grader.sandbox.blinding`).
What it returned is first read and validated against those pseudonyms
(:func:`grader.collect.outputs.collect_outputs`: an id that was not staged is
``OUTPUT_INVALID`` there); then, here, every pseudonym becomes its real id,
queries are put in real-id order and each ranking is re-ordered in trec order
under the real ids, exactly as a run written with the real ids would be. Vectors
come back in the order of the real ids (queries sorted by id, documents in the
task's order), so everything downstream (search, PCA, kept embeddings) sees what
it saw before blinding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

import numpy as np

from grader.collect.outputs import TaskOutputs
from grader.runs.ordering import byte_order_ranks
from grader.runs.run import Run


class IdMap(Protocol):
    """One side of a staged task (its queries or its documents), as the way back needs it.

    :class:`grader.sandbox.blinding.BlindedIds` is one: this stage reads what was
    staged, never how.
    """

    @property
    def real_of(self) -> Mapping[str, str]:
        """Pseudonym -> real id."""
        ...

    @property
    def rows(self) -> np.ndarray:
        """For each real id in the order it was given to staging, its row in the staged file."""
        ...


def unblind_outputs(outputs: TaskOutputs, *, queries: IdMap, documents: IdMap) -> TaskOutputs:
    """``outputs`` (validated under pseudonyms) under the real ids: a run renamed, vectors put back in real order."""
    if outputs.run is not None:
        return dataclasses.replace(outputs, run=unblind_run(outputs.run, queries=queries, documents=documents))
    if outputs.query_vectors is None or outputs.corpus_vectors is None:
        return outputs
    return dataclasses.replace(
        outputs, query_vectors=unblind_rows(outputs.query_vectors, queries), corpus_vectors=unblind_rows(outputs.corpus_vectors, documents)
    )


def unblind_run(run: Run, *, queries: IdMap, documents: IdMap) -> Run:
    """``run`` (under pseudonyms) with the real ids, queries in byte order of their real ids, rankings in trec order."""
    real_query, real_doc = queries.real_of, documents.real_of
    query_ids = [real_query[q] for q in run.query_ids]
    vocab = [real_doc[d] for d in run.doc_vocab]
    order = np.argsort(byte_order_ranks(query_ids), kind="stable")
    starts, ends = run.offsets[:-1][order], run.offsets[1:][order]
    lengths = ends - starts
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Entry positions of each query's segment, in the new query order.
    take = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    # Run.build re-sorts each ranking in trec order under the new (real) ids: ties break as they would unblinded.
    return Run.build([query_ids[i] for i in order.tolist()], offsets, run.doc_codes[take], vocab, run.scores[take], in_place=True)


def unblind_rows(vectors: np.ndarray, ids: IdMap) -> np.ndarray:
    """Rows of ``vectors`` (in staged order) put back in the order the ids were given to staging."""
    return np.ascontiguousarray(vectors[ids.rows])
