"""Back from pseudonyms to real ids: what a container returned, as the grader scores it.

A run has been read and validated against the staged pseudonyms (an id that was
not staged is ``OUTPUT_INVALID`` there); here every pseudonym becomes its real id,
queries are put in real-id order and each ranking is re-ordered in trec order
under the real ids, exactly as a run written with the real ids would be. Vectors
come back in the order of the real ids (queries sorted by id, documents in the
task's order), so everything downstream (search, PCA, kept embeddings) sees what
it saw before blinding.
"""

from __future__ import annotations

import numpy as np

from grader.runs.ordering import byte_order_ranks
from grader.runs.run import Run
from grader.sandbox.blinding import BlindedIds
from grader.sandbox.staging import StagedTask


def unblind_run(run: Run, staged: StagedTask) -> Run:
    """``run`` (under pseudonyms) with the real ids of ``staged``, queries in byte order of their real ids."""
    real_query = staged.queries.real_of
    real_doc = staged.documents.real_of
    query_ids = [real_query[q] for q in run.query_ids]
    vocab = [real_doc[d] for d in run.doc_vocab]
    order = np.argsort(byte_order_ranks(query_ids), kind="stable")
    starts, ends = run.offsets[:-1][order], run.offsets[1:][order]
    lengths = ends - starts
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Entry positions of each query's segment, in the new query order.
    take = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    return Run.build(
        [query_ids[i] for i in order.tolist()],
        offsets,
        run.doc_codes[take],
        vocab,
        run.scores[take],
        in_place=True,
    )


def unblind_rows(vectors: np.ndarray, ids: BlindedIds) -> np.ndarray:
    """Rows of ``vectors`` (in staged order) put back in the order the ids were given to staging."""
    return np.ascontiguousarray(vectors[ids.rows])
