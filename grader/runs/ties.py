"""The boundary tie group: what makes a depth cut independent of the ids it was searched under.

A worker ranks pseudonyms; a direct ``grader run`` ranks the real ids. Where several
documents tie with the depth-th hit's score, a cut at the depth keeps those whose id
sorts first, so the two would keep different documents. The worker therefore returns
the top ``depth`` hits plus every further hit tied with the depth-th (at most
``tie_slack(depth)`` more per query); the server renames them, re-sorts under the real
ids (trec order: score descending, ties by id as :mod:`grader.retrieval.exact` orders them)
and cuts at the depth (:func:`cut_at_depth`): the same hits a direct search keeps.
A tie group larger than the slack is cut under the pseudonyms: :func:`overflowing`
names those queries (docs/protocol.md, "Ties at the depth").
"""

from __future__ import annotations

import numpy as np

from grader.runs.run import Run


def tie_slack(depth: int) -> int:
    """How many hits beyond ``depth`` a query may carry, all tied with its depth-th hit."""
    return depth


def boundary_keep(offsets: np.ndarray, scores: np.ndarray, depth: int) -> np.ndarray:
    """Which hits (trec order, CSR ``offsets``) are in a query's first ``depth`` or tied with its depth-th score."""
    lengths = np.diff(offsets)
    rank = np.arange(len(scores), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    keep = rank < depth
    long = np.flatnonzero(lengths > depth)
    if len(long):
        boundary = np.repeat(scores[offsets[long] + depth - 1], lengths[long])
        inside = np.concatenate([np.arange(offsets[q], offsets[q + 1]) for q in long.tolist()])
        keep[inside] |= scores[inside] == boundary
    return keep


def only_boundary_ties(offsets: np.ndarray, scores: np.ndarray | None, depth: int) -> bool:
    """Whether every hit beyond a query's ``depth``-th ties with it (a run without scores may not exceed the depth)."""
    if not len(offsets) > 1 or int(np.diff(offsets).max(initial=0)) <= depth:
        return True
    return scores is not None and bool(boundary_keep(offsets, scores, depth).all())


def overflowing(offsets: np.ndarray, scores: np.ndarray | None, depth: int) -> int:
    """How many queries' tie groups at the depth may have been cut by the slack: full to ``depth + slack``, last hit still tied."""
    if scores is None:
        return 0
    lengths = np.diff(offsets)
    full = np.flatnonzero(lengths >= depth + tie_slack(depth))
    return int(np.count_nonzero(scores[offsets[full + 1] - 1] == scores[offsets[full] + depth - 1]))


def _select(run: Run, keep: np.ndarray) -> Run:
    kept = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    offsets = kept[run.offsets]
    return Run.build(run.query_ids, offsets, run.doc_codes[keep], run.doc_vocab, run.scores[keep], doc_ranks=run.doc_ranks, doc_ids_checked=True)


def keep_boundary_ties(run: Run, depth: int) -> Run:
    """``run`` (trec order) down to each query's first ``depth`` hits and those tied with its depth-th."""
    return _select(run, boundary_keep(run.offsets, run.scores, depth))


def cut_at_depth(run: Run, depth: int) -> Run:
    """``run`` (trec order) down to each query's first ``depth`` hits."""
    lengths = np.diff(run.offsets)
    if not len(lengths) or int(lengths.max()) <= depth:
        return run
    rank = np.arange(len(run.scores), dtype=np.int64) - np.repeat(run.offsets[:-1], lengths)
    return _select(run, rank < depth)
