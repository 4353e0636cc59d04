"""Where each judged document ranks in its query, found without ordering whole rankings (compiled).

Every measure depends on a ranking only through the 0-based ranks of its judged
documents (:func:`grader.metrics.per_query.measures_of_judged_entries`). A judged
document's rank in trec_eval's order (score descending, then doc id descending,
byte-wise) is the number of the query's documents ahead of it: a higher score,
or the same score and a larger id. Counting them costs one pass over the query
per judged document, far less than sorting the query when, as in every
benchmark, a query has a few judged documents among hundreds ranked; a query
with more judged documents than :data:`COUNT_UP_TO` is sorted instead.

The judgements are open-addressing hash tables over byte strings (query ids;
(query, doc id) pairs); a doc id's hash is the scanner's FNV-1a
(:func:`grader.runs.trec_scan.fnv1a`), and every hash match is confirmed on the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numba
import numpy as np

# The scanner's module points numba at its cache folder first (and makes numba reread it).
from grader.runs.trec_scan import CACHE, fnv1a, same_bytes

#: Judged documents of one query up to which counting beats sorting the query.
COUNT_UP_TO = 48

#: Judged documents of one query up to which a line is compared with each rather than looked up in the table.
FEW_PAIRS = 8

# rank_block's statuses.
OK = 0
REPEATED_DOC = 1  # a document twice in one query's lines

_MIX = np.uint64(0x9E3779B97F4A7C15)


class UnencodableId(Exception):
    """A judged id is not UTF-8 encodable (a lone surrogate from a JSON escape): no run line can name it this way."""


@dataclass(frozen=True)
class Judged:
    """The judgements of the judged queries (``query_ids``, in qrels order) as hash tables over their bytes."""

    query_ids: tuple[str, ...]
    query_bytes: np.ndarray
    query_offsets: np.ndarray
    query_slots: np.ndarray
    pair_query: np.ndarray
    pair_first: np.ndarray
    pair_bytes: np.ndarray
    pair_offsets: np.ndarray
    pair_hash: np.ndarray
    pair_rel: np.ndarray
    pair_slots: np.ndarray


def _arena(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    try:
        encoded = [value.encode("utf-8") for value in ids]
    except UnicodeEncodeError:
        raise UnencodableId from None
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(value) for value in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets


@numba.njit(cache=CACHE, nogil=True)
def _pair_slot(doc_hash: np.uint64, query: int, mask: int) -> int:  # pragma: no cover - compiled
    mixed = (doc_hash ^ (np.uint64(query) * _MIX)) * _MIX
    return int(mixed >> np.uint64(20)) & mask


@numba.njit(cache=CACHE, nogil=True)
def _build_tables(
    query_bytes: np.ndarray,
    query_offsets: np.ndarray,
    query_slots: np.ndarray,
    pair_query: np.ndarray,
    pair_bytes: np.ndarray,
    pair_offsets: np.ndarray,
    pair_hash: np.ndarray,
    pair_slots: np.ndarray,
) -> None:  # pragma: no cover - compiled
    query_mask = len(query_slots) - 1
    for q in range(len(query_offsets) - 1):
        slot = int(fnv1a(query_bytes, query_offsets[q], query_offsets[q + 1] - query_offsets[q]) >> np.uint64(8)) & query_mask
        while query_slots[slot] >= 0:
            slot = (slot + 1) & query_mask
        query_slots[slot] = q
    pair_mask = len(pair_slots) - 1
    for p in range(len(pair_query)):
        h = fnv1a(pair_bytes, pair_offsets[p], pair_offsets[p + 1] - pair_offsets[p])
        pair_hash[p] = h
        slot = _pair_slot(h, pair_query[p], pair_mask)
        while pair_slots[slot] >= 0:
            slot = (slot + 1) & pair_mask
        pair_slots[slot] = p


def _table_size(n: int) -> int:
    """A power of two at least twice ``n``: probes stay short."""
    return 1 << max(4, (2 * n).bit_length())


def judged_tables(qrels: Mapping[str, Mapping[str, int]], query_ids: Sequence[str], least: int) -> Judged:
    """Tables of ``query_ids`` (each at most once) and of their judgements ``>= least``; raises :class:`UnencodableId`."""
    pair_query: list[int] = []
    pair_docs: list[str] = []
    pair_rel: list[int] = []
    for qi, query_id in enumerate(query_ids):
        for doc_id, rel in qrels[query_id].items():
            if rel >= least:
                pair_query.append(qi)
                pair_docs.append(doc_id)
                pair_rel.append(rel)
    query_bytes, query_offsets = _arena(query_ids)
    pair_bytes, pair_offsets = _arena(pair_docs)
    pairs_of = np.asarray(pair_query, dtype=np.int64)
    # Pairs are grouped by query, in query order: query q's are pair_first[q]:pair_first[q + 1].
    pair_first = np.searchsorted(pairs_of, np.arange(len(query_ids) + 1, dtype=np.int64))
    judged = Judged(
        tuple(query_ids),
        query_bytes,
        query_offsets,
        np.full(_table_size(len(query_ids)), -1, dtype=np.int64),
        pairs_of,
        pair_first,
        pair_bytes,
        pair_offsets,
        np.empty(len(pair_docs), dtype=np.uint64),
        np.asarray(pair_rel, dtype=np.int64),
        np.full(_table_size(len(pair_docs)), -1, dtype=np.int64),
    )
    _build_tables(
        judged.query_bytes,
        judged.query_offsets,
        judged.query_slots,
        judged.pair_query,
        judged.pair_bytes,
        judged.pair_offsets,
        judged.pair_hash,
        judged.pair_slots,
    )
    return judged


@numba.njit(cache=CACHE, nogil=True)
def _same_as(a: np.ndarray, a_start: int, a_length: int, b: np.ndarray, b_start: int, b_length: int) -> bool:  # pragma: no cover - compiled
    if a_length != b_length:
        return False
    for k in range(a_length):  # noqa: SIM110 - a loop compiles to a loop; all() of a generator would not
        if a[a_start + k] != b[b_start + k]:
            return False
    return True


@numba.njit(cache=CACHE, nogil=True, inline="always")
def _greater(data: np.ndarray, a: int, a_length: int, b: int, b_length: int) -> bool:  # pragma: no cover - compiled
    """Whether ``data[a:a+a_length]`` sorts after ``data[b:b+b_length]`` byte-wise (strcmp's order)."""
    n = min(a_length, b_length)
    for k in range(n):
        x = data[a + k]
        y = data[b + k]
        if x != y:
            return x > y
    return a_length > b_length


@numba.njit(cache=CACHE, nogil=True)
def _ahead(data: np.ndarray, doc_start: np.ndarray, doc_length: np.ndarray, keys: np.ndarray, i: int, j: int) -> bool:  # pragma: no cover - compiled
    """Whether line ``i`` ranks before line ``j`` in trec_eval's order."""
    if keys[i] != keys[j]:
        return keys[i] > keys[j]
    return _greater(data, doc_start[i], doc_length[i], doc_start[j], doc_length[j])


@numba.njit(cache=CACHE, nogil=True)
def _merge_sort(
    data: np.ndarray, doc_start: np.ndarray, doc_length: np.ndarray, keys: np.ndarray, order: np.ndarray, spare: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Sort the line indexes ``order`` into trec_eval's order (bottom-up merge sort)."""
    n = len(order)
    width = 1
    source, target = order, spare
    swapped = False
    while width < n:
        for low in range(0, n, 2 * width):
            middle = min(low + width, n)
            high = min(low + 2 * width, n)
            a, b, k = low, middle, low
            while a < middle and b < high:
                if _ahead(data, doc_start, doc_length, keys, source[b], source[a]):
                    target[k] = source[b]
                    b += 1
                else:
                    target[k] = source[a]
                    a += 1
                k += 1
            while a < middle:
                target[k] = source[a]
                a += 1
                k += 1
            while b < high:
                target[k] = source[b]
                b += 1
                k += 1
        source, target = target, source
        swapped = not swapped
        width *= 2
    if swapped:
        order[:] = source


@numba.njit(cache=CACHE, nogil=True)
def rank_block(
    data: np.ndarray,
    count: int,
    query_start: np.ndarray,
    query_length: np.ndarray,
    doc_start: np.ndarray,
    doc_length: np.ndarray,
    doc_hash: np.ndarray,
    scores: np.ndarray,
    query_bytes: np.ndarray,
    query_offsets: np.ndarray,
    query_slots: np.ndarray,
    pair_query: np.ndarray,
    pair_first: np.ndarray,
    pair_bytes: np.ndarray,
    pair_offsets: np.ndarray,
    pair_hash: np.ndarray,
    pair_rel: np.ndarray,
    pair_slots: np.ndarray,
    float32_scores: bool,
    drop_query_id: bool,
    run_first: np.ndarray,
    run_judged: np.ndarray,
    run_length: np.ndarray,
    hit_run: np.ndarray,
    hit_rank: np.ndarray,
    hit_rel: np.ndarray,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """Each run of lines with one query id: its first line, judged query (-1: none), ranked length, and the ranks of its judged documents.

    Returns ``(runs, hits, status)``; a status other than :data:`OK` stops at that run.
    ``float32_scores`` ranks on scores rounded to float32 and ``drop_query_id``
    leaves out a document whose id is the query's (the coir policy).
    """
    keys = np.empty(count, dtype=np.float64)
    for line in range(count):
        keys[line] = np.float64(np.float32(scores[line])) if float32_scores else scores[line]
    # Runs first, for the longest one: the repeat table is sized by it.
    n_runs = 0
    longest = 0
    line = 0
    while line < count:
        end = line + 1
        while end < count and query_length[end] == query_length[line] and same_bytes(data, query_start[end], query_start[line], query_length[line]):
            end += 1
        run_first[n_runs] = line
        n_runs += 1
        longest = max(longest, end - line)
        line = end
    run_first[n_runs] = count
    size = 16
    while size < 2 * longest:
        size *= 2
    seen_line = np.empty(size, dtype=np.int64)
    seen_run = np.full(size, -1, dtype=np.int64)
    kept = np.empty(longest, dtype=np.int64)
    judged_line = np.empty(longest, dtype=np.int64)
    judged_rel = np.empty(longest, dtype=np.int64)
    order = np.empty(longest, dtype=np.int64)
    spare = np.empty(longest, dtype=np.int64)
    judged_at = np.full(count, -1, dtype=np.int64)  # a line's index among its run's judged lines
    query_mask = len(query_slots) - 1
    pair_mask = len(pair_slots) - 1
    n_hits = 0
    for r in range(n_runs):
        first, end = run_first[r], run_first[r + 1]
        q_start, q_length = query_start[first], query_length[first]
        # The judged query this is, if any.
        query = -1
        slot = int(fnv1a(data, q_start, q_length) >> np.uint64(8)) & query_mask
        while query_slots[slot] >= 0:
            candidate = query_slots[slot]
            if _same_as(data, q_start, q_length, query_bytes, query_offsets[candidate], query_offsets[candidate + 1] - query_offsets[candidate]):
                query = candidate
                break
            slot = (slot + 1) & query_mask
        run_judged[r] = query
        pairs_from = pair_first[query] if query >= 0 else 0
        pairs_to = pair_first[query + 1] if query >= 0 else 0
        few_pairs = pairs_to - pairs_from <= FEW_PAIRS
        # No document twice: a table of this run's lines by doc id hash.
        mask = 16
        while mask < 2 * (end - first):
            mask *= 2
        mask -= 1
        n_kept = 0
        n_judged = 0
        for line in range(first, end):
            h = doc_hash[line]
            slot = int(h >> np.uint64(16)) & mask
            while seen_run[slot] == r:
                other = seen_line[slot]
                if doc_hash[other] == h and _same_as(data, doc_start[other], doc_length[other], data, doc_start[line], doc_length[line]):
                    return r, n_hits, REPEATED_DOC
                slot = (slot + 1) & mask
            seen_run[slot] = r
            seen_line[slot] = line
            if drop_query_id and _same_as(data, doc_start[line], doc_length[line], data, q_start, q_length):
                continue
            kept[n_kept] = line
            n_kept += 1
            if query < 0:
                continue
            found = -1
            if few_pairs:
                # A few judged documents: compare with each (their hashes sit in cache), not a table far away.
                for p in range(pairs_from, pairs_to):
                    if pair_hash[p] == h and _same_as(
                        data, doc_start[line], doc_length[line], pair_bytes, pair_offsets[p], pair_offsets[p + 1] - pair_offsets[p]
                    ):
                        found = p
                        break
            else:
                slot = _pair_slot(h, query, pair_mask)
                while pair_slots[slot] >= 0:
                    p = pair_slots[slot]
                    if (
                        pair_hash[p] == h
                        and pair_query[p] == query
                        and _same_as(data, doc_start[line], doc_length[line], pair_bytes, pair_offsets[p], pair_offsets[p + 1] - pair_offsets[p])
                    ):
                        found = p
                        break
                    slot = (slot + 1) & pair_mask
            if found >= 0:
                judged_line[n_judged] = line
                judged_rel[n_judged] = pair_rel[found]
                n_judged += 1
        run_length[r] = n_kept
        if n_judged == 0:
            continue
        if n_judged <= COUNT_UP_TO:
            for j in range(n_judged):
                target = judged_line[j]
                key = keys[target]
                ahead = 0
                for k in range(n_kept):
                    line = kept[k]
                    other = keys[line]
                    # Written out (not _ahead): this loop runs once per line per judged document.
                    if other > key or (
                        other == key and line != target and _greater(data, doc_start[line], doc_length[line], doc_start[target], doc_length[target])
                    ):
                        ahead += 1
                hit_run[n_hits] = r
                hit_rank[n_hits] = ahead
                hit_rel[n_hits] = judged_rel[j]
                n_hits += 1
        else:
            ranked = order[:n_kept]
            ranked[:] = kept[:n_kept]
            _merge_sort(data, doc_start, doc_length, keys, ranked, spare[:n_kept])
            for j in range(n_judged):
                judged_at[judged_line[j]] = j
            for position in range(n_kept):
                j = judged_at[ranked[position]]
                if j >= 0:
                    hit_run[n_hits] = r
                    hit_rank[n_hits] = position
                    hit_rel[n_hits] = judged_rel[j]
                    n_hits += 1
    return n_runs, n_hits, OK
