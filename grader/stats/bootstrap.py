"""The paired bootstrap: resample queries within each leaf, re-apply the aggregation, take percentile intervals.

Resample b draws, for each leaf l of ``n_l`` queries, ``n_l`` query indices
with replacement: words ``b*n_l .. b*n_l + n_l - 1`` of stream (seed,
BOOTSTRAP, l), each turned into an index by :func:`grader.stats.draws.indices_from_words`.
Every entry is scored on the same resample (paired), so ranks can be compared
within a resample. Counts of each query, not index arrays, meet the values:
one (rows x n_l) count matrix times the (n_l x entries) weighted values per
chunk of resamples, so memory stays at a few tens of megabytes.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from grader.errors import UsageError
from grader.stats.aggregate import ScoreTable
from grader.stats.draws import BOOTSTRAP, WordStream, indices_from_words, stream_id

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
#: Random words drawn per chunk of resamples (over all leaves): 1 Mi words = 8 MiB, cache-friendly.
CHUNK_WORDS = 1 << 20


def leaf_columns(table: ScoreTable) -> list[np.ndarray]:
    """Per leaf, the (n_l, entries) quantized values, contiguous for the count-matrix product."""
    quantized = table.quantized()
    return [np.ascontiguousarray(quantized[:, table.layout.leaf_slice(leaf)].T) for leaf in range(len(table.layout.leaves))]


def rows_per_chunk(total_queries: int) -> int:
    """Resamples handled together so that one chunk draws about :data:`CHUNK_WORDS` words."""
    return max(1, CHUNK_WORDS // max(1, total_queries))


def bootstrap_scores(table: ScoreTable, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """A (resamples, entries) array: each entry's aggregated score on each resample.

    Replicate b = sum over leaves, in layout order, of ``scale_l * S_bl`` where
    ``S_bl = sum_q count_bq * rint(v_q * 2**32)`` is exact (see
    :data:`grader.stats.aggregate.QUANTUM_BITS`), so the result is bit-identical
    on any machine.
    """
    if resamples < 1:
        raise UsageError("resamples must be positive")
    layout = table.layout
    columns = leaf_columns(table)
    scales = table.leaf_scales()
    streams = [WordStream(seed, stream_id(BOOTSTRAP, leaf)) for leaf in range(len(layout.leaves))]
    out = np.zeros((resamples, len(table.names)), dtype=np.float64)
    chunk = rows_per_chunk(layout.total)
    # Reused per leaf: the row offsets added to indices, and the float count matrix (fresh large arrays cost page faults).
    offsets = [np.repeat(np.arange(chunk, dtype=np.int64) * int(n), int(n)) for n in layout.sizes]
    buffers = [np.empty((chunk, int(n)), dtype=np.float64) for n in layout.sizes]
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        for leaf, stream in enumerate(streams):
            n = int(layout.sizes[leaf])
            counts = buffers[leaf][:rows]
            np.copyto(counts, resample_counts(stream.words(rows * n), rows, n, offsets[leaf][: rows * n]))
            out[start : start + rows] += (counts @ columns[leaf]) * scales[leaf]
    return out


def resample_counts(words: np.ndarray, rows: int, n: int, offsets: np.ndarray | None = None) -> np.ndarray:
    """(rows, n) int64: how often each of n queries is drawn in each row (n indices per row)."""
    indices = indices_from_words(words, n)
    # Row r's indices go to bins r*n .. r*n+n-1: one bincount gives every row's counts.
    indices += np.repeat(np.arange(rows, dtype=np.int64) * n, n) if offsets is None else offsets
    return np.bincount(indices, minlength=rows * n).reshape(rows, n)


def order_statistic_ranks(resamples: int, level: float) -> tuple[int, int]:
    """1-based ranks (k, B+1-k) of the percentile interval's ends, k = floor((B+1)(1-level)/2).

    ``level`` is read as the decimal it prints as (0.95 -> 19/20), so k is exact.
    """
    alpha = 1 - Fraction(str(level))
    if not 0 < alpha < 1:
        raise UsageError(f"confidence level {level} is not in (0, 1)")
    k = int((resamples + 1) * alpha / 2)
    if k < 1:
        raise UsageError(f"{resamples} resamples are too few for a {level} interval (need at least {int(2 / alpha)})")
    return k, resamples + 1 - k


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``replicates`` (resamples, entries): the k-th smallest and k-th largest value.

    With B = 10,000 and level 0.95: the 250th and 9,751st of the sorted values; no interpolation.
    """
    low, high = order_statistic_ranks(replicates.shape[0], level)
    ordered = np.sort(replicates, axis=0)
    return ordered[low - 1], ordered[high - 1]
