"""trec_eval's ranking order, computed once, on integers and floats, per query segment.

Within a query, documents are ranked by score descending, ties broken by document
id descending, byte-wise (``strcmp``). Document ids enter as integer codes plus
``doc_rank``: the position of each code's id in byte-wise sorted order, so a tie
compares two integers instead of two strings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def byte_order_ranks(vocabulary: Sequence[str]) -> np.ndarray:
    """Rank of each id in byte-wise (UTF-8) order.

    Python compares ``str`` by code point, which is the order of their UTF-8
    bytes, so sorting the strings gives ``strcmp`` order without encoding them.
    """
    order = sorted(range(len(vocabulary)), key=vocabulary.__getitem__)
    ranks = np.empty(len(vocabulary), dtype=np.int64)
    ranks[np.asarray(order, dtype=np.int64)] = np.arange(len(vocabulary), dtype=np.int64)
    return ranks


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """For a CSR layout, the segment (query) index of every entry."""
    lengths = np.diff(offsets)
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


def is_trec_ordered(offsets: np.ndarray, scores: np.ndarray, doc_ranks: np.ndarray) -> bool:
    """Whether every segment is already in trec_eval order (an O(n) check)."""
    if len(scores) < 2:
        return True
    same_segment = np.ones(len(scores) - 1, dtype=bool)
    boundaries = offsets[1:-1]
    boundaries = boundaries[(boundaries > 0) & (boundaries < len(scores))]
    same_segment[boundaries - 1] = False
    ahead, behind = scores[:-1], scores[1:]
    in_order = (ahead > behind) | ((ahead == behind) & (doc_ranks[:-1] > doc_ranks[1:]))
    return bool(np.all(in_order | ~same_segment))


def trec_order(offsets: np.ndarray, scores: np.ndarray, doc_ranks: np.ndarray) -> np.ndarray:
    """Permutation putting each segment in trec_eval order (segments stay in place).

    Segments of equal length are sorted together as rows of a matrix, so the cost is
    one row-wise argsort per distinct length rather than a global multi-key sort.
    Score ties are then re-ordered by document rank, descending.
    """
    n = len(scores)
    permutation = np.arange(n, dtype=np.int64)
    if is_trec_ordered(offsets, scores, doc_ranks):
        return permutation
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    for length in np.unique(lengths):
        if length < 2:
            continue
        rows = starts[lengths == length]
        index = rows[:, None] + np.arange(length, dtype=np.int64)[None, :]
        by_score = np.argsort(-scores[index], axis=1, kind="stable")
        permutation[index] = np.take_along_axis(index, by_score, axis=1)
    _break_ties(permutation, offsets, scores, doc_ranks)
    return permutation


def _break_ties(permutation: np.ndarray, offsets: np.ndarray, scores: np.ndarray, doc_ranks: np.ndarray) -> None:
    """Within runs of equal scores of one segment, order by document rank descending (in place)."""
    ordered_scores = scores[permutation]
    if len(ordered_scores) < 2:
        return
    tied_with_next = ordered_scores[:-1] == ordered_scores[1:]
    boundaries = offsets[1:-1]
    boundaries = boundaries[(boundaries > 0) & (boundaries < len(scores))]
    tied_with_next[boundaries - 1] = False
    if not tied_with_next.any():
        return
    in_tie = np.zeros(len(ordered_scores), dtype=bool)
    in_tie[:-1] |= tied_with_next
    in_tie[1:] |= tied_with_next
    positions = np.flatnonzero(in_tie)
    # A new tie group starts wherever an entry is not tied with its predecessor.
    starts_group = np.ones(len(positions), dtype=bool)
    starts_group[1:] = ~tied_with_next[positions[1:] - 1]
    group = np.cumsum(starts_group) - 1
    ranks = doc_ranks[permutation[positions]]
    # Groups are already in position order; sort by (group, rank descending), as one
    # integer key when it fits in 63 bits (it does for any realistic run).
    span = int(ranks.max()) + 1 if len(ranks) else 1
    if int(group[-1]) < (1 << 62) // span:
        order = np.argsort(group * np.int64(span) + (span - 1 - ranks), kind="stable")
    else:
        order = np.lexsort((-ranks, group))
    permutation[positions] = permutation[positions[order]]
