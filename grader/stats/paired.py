"""Paired tests between entries over the same queries: the paired t-test and the sign-flip randomization test.

Both test the difference of aggregated scores, D = sum_l W_l * mean_l(d), where
d = per-query differences and W_l the leaf weights of the benchmark's
aggregation (one leaf: the plain mean difference).

* t-test: t = D / sqrt(sum_l W_l**2 s_l**2 / n_l), s_l the sample standard
  deviation (ddof 1) of d within leaf l, degrees of freedom by
  Welch-Satterthwaite, p two-sided from Student's t. On one leaf this is
  exactly ``scipy.stats.ttest_rel``.
* randomization (Fisher's sign-flip) test: under the null each d_q is as likely
  to be -d_q; T = sum_q w_q s_q d_q over random signs s (drawn as in
  :mod:`grader.stats.draws`, one row of signs per resample shared by all pairs),
  p = (1 + #{|T_b| >= |T_obs|}) / (B + 1). When 2**N <= B (N queries in all)
  every sign vector is enumerated instead and p = #{|T_v| >= |T_obs|} / 2**N.
  Leaf sums use the quantized values (exact); a flipped statistic within a
  relative 1e-12 of the observed one counts as a tie (>=).
* effect sizes: D, and Cohen's d_z = D / sqrt(sum_l W_l s_l**2) (one leaf: mean(d) / sd(d)).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from grader.stats.aggregate import Layout, ScoreTable
from grader.stats.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, leaf_columns, rows_per_chunk
from grader.stats.draws import SIGN_FLIP, WordStream, sign_bits_from_words, stream_id, words_per_sign_row

#: Relative tolerance under which a flipped statistic counts as equal to the observed one.
TIE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class TTest:
    """A paired t-test of the aggregated difference; ``statistic`` is None when the differences do not vary."""

    mean_difference: float
    effect_size: float | None
    statistic: float | None
    df: float
    p_value: float


def paired_t(differences: np.ndarray, layout: Layout) -> TTest:
    """The paired t-test of ``differences`` (first minus second, per query, in layout order)."""
    mean = 0.0
    variance = 0.0
    pooled = 0.0
    df_terms = 0.0
    for leaf in range(len(layout.leaves)):
        d = differences[layout.leaf_slice(leaf)]
        n = d.shape[0]
        weight = float(layout.leaf_weights[leaf])
        leaf_mean = float(np.mean(d))
        leaf_var = float(np.var(d, ddof=1)) if n > 1 else 0.0
        mean += weight * leaf_mean
        term = weight**2 * leaf_var / n
        variance += term
        pooled += weight * leaf_var
        if n > 1:
            df_terms += term**2 / (n - 1)
    if len(layout.leaves) == 1:
        n = layout.total
        df = float(n - 1)
        # scipy.stats.ttest_rel's own arithmetic, so both agree to the last bits.
        d = differences
        mean = float(np.mean(d))
        denominator = float(np.sqrt(np.var(d, ddof=1) / n)) if n > 1 else 0.0
    else:
        df = variance**2 / df_terms if df_terms > 0 else float(layout.total - len(layout.leaves))
        denominator = float(np.sqrt(variance))
    effect = mean / float(np.sqrt(pooled)) if pooled > 0 else None
    if denominator == 0.0 or df <= 0:
        return TTest(mean, effect, None, df, 1.0 if mean == 0.0 else 0.0)
    statistic = mean / denominator
    p_value = float(2 * scipy_stats.t.sf(abs(statistic), df))
    return TTest(mean, effect, statistic, df, min(1.0, p_value))


def _flipped_sums(columns: list[np.ndarray], layout: Layout, resamples: int, seed: int) -> Iterator[list[np.ndarray]]:
    """Per chunk of sign rows, per leaf: the (rows, entries) sums ``sum_q s_q k_q``, exact.

    With bits b_q (s_q = 1 - 2 b_q) the sum is ``sum_q k_q - 2 sum_q b_q k_q``: the 0/1 bits
    go straight into one reused float buffer, and every term stays an exact integer.
    """
    streams = [WordStream(seed, stream_id(SIGN_FLIP, leaf)) for leaf in range(len(layout.leaves))]
    totals = [column.sum(axis=0) for column in columns]
    chunk = rows_per_chunk(layout.total)
    buffers = [np.empty((chunk, int(n)), dtype=np.float64) for n in layout.sizes]
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        sums = []
        for leaf, stream in enumerate(streams):
            n = int(layout.sizes[leaf])
            bits = buffers[leaf][:rows]
            np.copyto(bits, sign_bits_from_words(stream.words(rows * words_per_sign_row(n)), rows, n))
            sums.append(totals[leaf] - 2.0 * (bits @ columns[leaf]))
        yield sums


def _enumerated_sums(columns: list[np.ndarray], layout: Layout) -> Iterator[list[np.ndarray]]:
    """Every sign vector once, in chunks: row v flips query j (layout order) when bit j of v is set."""
    total = layout.total
    positions = np.arange(total, dtype=np.int64)[None, :]
    chunk = 1 << 16
    for start in range(0, 1 << total, chunk):
        vectors = np.arange(start, min(start + chunk, 1 << total), dtype=np.int64)
        signs = 1.0 - 2.0 * ((vectors[:, None] >> positions) & 1).astype(np.float64)
        yield [signs[:, layout.leaf_slice(leaf)] @ columns[leaf] for leaf in range(len(layout.leaves))]


def exact_enumeration(layout: Layout, resamples: int) -> bool:
    """Whether the randomization test enumerates every sign vector (2**N <= resamples)."""
    return layout.total < 63 and (1 << layout.total) <= resamples


def randomization_pvalues(
    table: ScoreTable, pairs: Sequence[tuple[int, int]], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> tuple[np.ndarray, bool]:
    """Two-sided sign-flip p-values of each (first, second) pair of rows; and whether they are exact."""
    layout = table.layout
    columns = leaf_columns(table)
    scales = table.leaf_scales()
    first = np.array([a for a, _ in pairs], dtype=np.int64)
    second = np.array([b for _, b in pairs], dtype=np.int64)

    def statistic(leaf_sums: list[np.ndarray]) -> np.ndarray:
        # Exact integer differences per leaf, then one weighted sum in leaf order: same operations
        # for the observed and the flipped statistics, so equal sums compare equal.
        total = np.zeros((*leaf_sums[0].shape[:-1], len(pairs)), dtype=np.float64)
        for leaf, sums in enumerate(leaf_sums):
            total += (sums[..., first] - sums[..., second]) * scales[leaf]
        return np.abs(total)

    # Ties within a relative 1e-12 count (as in scipy.stats.permutation_test): the weighted sum over
    # several leaves is rounded, and a mathematically equal statistic must not fall just below.
    observed = statistic([column.sum(axis=0) for column in columns]) * (1 - TIE_TOLERANCE)
    exact = exact_enumeration(layout, resamples)
    chunks = _enumerated_sums(columns, layout) if exact else _flipped_sums(columns, layout, resamples, seed)
    at_least = np.zeros(len(pairs), dtype=np.int64)
    for sums in chunks:
        at_least += np.count_nonzero(statistic(sums) >= observed, axis=0)
    if exact:
        return at_least / float(1 << layout.total), True
    return (1 + at_least) / (resamples + 1), False


def all_pairs(order: Sequence[int]) -> list[tuple[int, int]]:
    """Every pair (better, worse) of entries listed best first."""
    return list(itertools.combinations(order, 2))
