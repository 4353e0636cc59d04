"""trec_eval's ranking order, computed once, on integers and floats, per query segment.

Within a query, documents are ranked by score descending, ties broken by document
id descending, byte-wise (``strcmp``). Document ids enter as integer codes plus
``doc_rank``: the position of each code's id in byte-wise sorted order, so a tie
compares two integers instead of two strings.

Runs can hold tens of millions of entries, so the in-place entry point
(:func:`order_in_place`) works on chunks of whole segments: its temporaries are
bounded by the chunk, not by the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

# Entries per chunk of whole segments: large enough that per-chunk overhead is
# negligible, small enough that int64 temporaries (8 MiB each) stay in cache-sized
# territory and never approach the size of the run itself.
CHUNK_ENTRIES = 1 << 20


def byte_order_ranks(vocabulary: Sequence[str]) -> np.ndarray:
    """Rank of each id in byte-wise (UTF-8) order.

    Arrow sorts the UTF-8 bytes (several times faster than sorting Python
    strings). Python compares ``str`` by code point, which is the same order, so
    ids Arrow cannot take (lone surrogates, from a JSON escape) are sorted as
    Python strings instead.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        order = pc.sort_indices(pa.array(vocabulary, type=pa.string())).to_numpy()
    except (pa.ArrowException, UnicodeEncodeError):
        order = np.asarray(sorted(range(len(vocabulary)), key=vocabulary.__getitem__), dtype=np.int64)
    ranks = np.empty(len(vocabulary), dtype=np.int64)
    ranks[order] = np.arange(len(vocabulary), dtype=np.int64)
    return ranks


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """For a CSR layout, the segment (query) index of every entry."""
    lengths = np.diff(offsets)
    return np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)


@overload
def segment_of(offsets: np.ndarray, entries: int) -> int: ...
@overload
def segment_of(offsets: np.ndarray, entries: np.ndarray) -> np.ndarray: ...
def segment_of(offsets: np.ndarray, entries: np.ndarray | int) -> np.ndarray | int:
    """The segment holding each of ``entries`` (empty segments share a start; the last one with it owns the entry)."""
    found = np.searchsorted(offsets, entries, side="right") - 1
    return int(found) if np.ndim(found) == 0 else found


def segment_chunks(offsets: np.ndarray, max_entries: int = CHUNK_ENTRIES) -> Iterator[tuple[int, int]]:
    """Consecutive segment ranges ``[first, last)`` of at most ``max_entries`` entries each.

    A segment longer than ``max_entries`` is a chunk of its own.
    """
    n_segments = len(offsets) - 1
    first = 0
    while first < n_segments:
        last = int(np.searchsorted(offsets, offsets[first] + max_entries, side="right")) - 1
        last = min(max(last, first + 1), n_segments)
        yield first, last
        first = last


def first_repeat(offsets: np.ndarray, values: np.ndarray, *, max_entries: int = CHUNK_ENTRIES) -> tuple[int, int] | None:
    """The first segment in which a value appears twice, and its smallest such value; ``None`` if none.

    Segments are sorted as rows of a matrix, one matrix per distinct length within
    a chunk of whole segments: short row-wise sorts of the codes themselves, far
    cheaper than one global sort of (segment, value) keys, with chunk-bounded
    temporaries.
    """
    for first, last in segment_chunks(offsets, max_entries):
        start = int(offsets[first])
        local = offsets[first : last + 1] - start
        chunk = values[start : int(offsets[last])]
        lengths = np.diff(local)
        found: tuple[int, int] | None = None
        distinct = np.unique(lengths)
        for length in distinct:
            if length < 2:
                continue
            if len(distinct) == 1:
                rows = np.arange(len(lengths))
                matrix = chunk.reshape(-1, int(length))  # every segment of the chunk has this length
            else:
                rows = np.flatnonzero(lengths == length)
                matrix = chunk[local[rows][:, None] + np.arange(length, dtype=np.int64)[None, :]]
            ordered = np.sort(matrix, axis=1)
            repeated = ordered[:, 1:] == ordered[:, :-1]
            hits = np.flatnonzero(repeated.any(axis=1))
            if len(hits) and (found is None or first + int(rows[hits[0]]) < found[0]):
                row = int(hits[0])
                found = (first + int(rows[row]), int(ordered[row, 1:][repeated[row]][0]))
        if found is not None:
            return found
    return None


def _same_segment_as_next(offsets: np.ndarray, n: int) -> np.ndarray:
    """``mask[i]``: entries ``i`` and ``i + 1`` belong to the same segment (length ``n - 1``)."""
    same_segment = np.ones(n - 1, dtype=bool)
    boundaries = offsets[1:-1]
    boundaries = boundaries[(boundaries > 0) & (boundaries < n)]
    same_segment[boundaries - 1] = False
    return same_segment


def is_trec_ordered(offsets: np.ndarray, scores: np.ndarray, doc_ranks: np.ndarray) -> bool:
    """Whether every segment is already in trec_eval order (an O(n) check)."""
    if len(scores) < 2:
        return True
    same_segment = _same_segment_as_next(offsets, len(scores))
    ahead, behind = scores[:-1], scores[1:]
    in_order = (ahead > behind) | ((ahead == behind) & (doc_ranks[:-1] > doc_ranks[1:]))
    return bool(np.all(in_order | ~same_segment))


def trec_order(offsets: np.ndarray, scores: np.ndarray, doc_ranks: np.ndarray) -> np.ndarray:
    """Permutation putting each segment in trec_eval order (segments stay in place).

    Segments of equal length are sorted together as rows of a matrix, so the cost is
    one row-wise argsort per distinct length rather than a global multi-key sort.
    Score ties are then re-ordered by document rank, descending.
    """
    permutation = _trec_permutation(offsets, scores, doc_ranks)
    return np.arange(len(scores), dtype=np.int64) if permutation is None else permutation


def order_in_place(
    offsets: np.ndarray, doc_codes: np.ndarray, scores: np.ndarray, code_ranks: np.ndarray, *, max_entries: int = CHUNK_ENTRIES
) -> None:
    """Put every segment of ``(doc_codes, scores)`` in trec_eval order, permuting both arrays in place.

    ``code_ranks[code]`` is the byte-order rank of a code's id. Works on chunks of
    whole segments, so no temporary is larger than a chunk.
    """
    for first, last in segment_chunks(offsets, max_entries):
        start, end = int(offsets[first]), int(offsets[last])
        codes = doc_codes[start:end]
        chunk_scores = scores[start:end]
        permutation = _trec_permutation(offsets[first : last + 1] - start, chunk_scores, code_ranks[codes])
        if permutation is not None:
            codes[:] = codes[permutation]
            chunk_scores[:] = chunk_scores[permutation]


def _trec_permutation(offsets: np.ndarray, scores: np.ndarray, doc_ranks: np.ndarray) -> np.ndarray | None:
    """Permutation into trec order, or ``None`` when the entries are already in it."""
    n = len(scores)
    if n < 2:
        return None
    same_segment = _same_segment_as_next(offsets, n)
    ahead, behind = scores[:-1], scores[1:]
    if np.all((ahead >= behind) | ~same_segment):
        # Already score-descending, as retrievers write their runs: only runs of
        # tied scores can be out of order, so skip the sort by score.
        tied_with_next = (ahead == behind) & same_segment
        if not tied_with_next.any() or np.all(doc_ranks[:-1][tied_with_next] > doc_ranks[1:][tied_with_next]):
            return None
        permutation = np.arange(n, dtype=np.int64)
        _break_ties(permutation, tied_with_next, doc_ranks)
        return permutation
    permutation = np.arange(n, dtype=np.int64)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    for length in np.unique(lengths):
        if length < 2:
            continue
        rows = starts[lengths == length]
        index = rows[:, None] + np.arange(length, dtype=np.int64)[None, :]
        by_score = np.argsort(-scores[index], axis=1, kind="stable")
        permutation[index] = np.take_along_axis(index, by_score, axis=1)
    ordered_scores = scores[permutation]
    _break_ties(permutation, (ordered_scores[:-1] == ordered_scores[1:]) & same_segment, doc_ranks)
    return permutation


def _break_ties(permutation: np.ndarray, tied_with_next: np.ndarray, doc_ranks: np.ndarray) -> None:
    """Within runs of equal scores of one segment, order by document rank descending (in place).

    ``tied_with_next[i]``: the entries at positions ``i`` and ``i + 1`` of ``permutation``
    have equal scores and belong to the same segment.
    """
    if not tied_with_next.any():
        return
    in_tie = np.zeros(len(permutation), dtype=bool)
    in_tie[:-1] |= tied_with_next
    in_tie[1:] |= tied_with_next
    positions = np.flatnonzero(in_tie)
    # A new tie group starts wherever an entry is not tied with its predecessor.
    starts_group = np.ones(len(positions), dtype=bool)
    starts_group[1:] = ~tied_with_next[positions[1:] - 1]
    group = np.cumsum(starts_group) - 1
    ranks = doc_ranks[permutation[positions]].astype(np.int64, copy=False)
    # Groups are already in position order; sort by (group, rank descending), as one
    # integer key when it fits in 63 bits (it does for any realistic run).
    span = int(ranks.max()) + 1 if len(ranks) else 1
    if int(group[-1]) < (1 << 62) // span:
        order = np.argsort(group * np.int64(span) + (span - 1 - ranks), kind="stable")
    else:
        order = np.lexsort((-ranks, group))
    permutation[positions] = permutation[positions[order]]
