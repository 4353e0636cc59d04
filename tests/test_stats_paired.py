"""Paired tests: the t-test against scipy, the sign-flip randomization test against exact enumeration."""

from __future__ import annotations

import itertools
import math
import statistics
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as scipy_stats

from grader.stats.aggregate import Layout
from grader.stats.paired import TIE_TOLERANCE, exact_enumeration, paired_t, randomization_pvalues
from tests.stats_support import table_of

QUANTUM = 2**32


@pytest.mark.parametrize("n", [2, 3, 10, 881, 5000])
def test_single_task_t_test_equals_scipy_ttest_rel(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.beta(2, 3, n)
    b = np.clip(a + rng.normal(0.01, 0.1, n), 0, 1)
    table = table_of([a.tolist(), b.tolist()])
    result = paired_t(table.values[0] - table.values[1], table.layout)
    expected = scipy_stats.ttest_rel(table.values[0], table.values[1])
    assert result.statistic == pytest.approx(float(expected.statistic), rel=1e-12, abs=0)
    assert result.p_value == pytest.approx(float(expected.pvalue), rel=1e-12, abs=1e-300)
    assert result.df == n - 1
    d = table.values[0] - table.values[1]
    assert result.effect_size == pytest.approx(float(np.mean(d) / np.std(d, ddof=1)), rel=1e-12)


def test_constant_differences_have_no_t_statistic() -> None:
    table = table_of([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]])
    same = paired_t(table.values[0] - table.values[1], table.layout)
    assert (same.statistic, same.p_value, same.effect_size) == (None, 1.0, None)
    shifted = paired_t(table.values[0] - table.values[2], table.layout)
    assert (shifted.statistic, shifted.p_value, shifted.mean_difference) == (None, 0.0, 0.25)


def test_multi_task_t_test_follows_the_aggregation() -> None:
    # Leaves a (grouped with b), b, c: weights 1/4, 1/4, 1/2.
    rng = np.random.default_rng(7)
    sizes = {"a": 40, "b": 25, "c": 60}
    first = rng.random(125)
    second = np.clip(first + rng.normal(0.02, 0.2, 125), 0, 1)
    table = table_of([first.tolist(), second.tolist()], sizes, {"G": ["a", "b"]})
    result = paired_t(table.values[0] - table.values[1], table.layout)
    # Independently: per-leaf means and variances with the statistics module, then the written formulas.
    weights = {"a": 0.25, "b": 0.25, "c": 0.5}
    mean = var = pooled = df_den = 0.0
    for leaf in sorted(sizes):
        d = [table.values[0, i] - table.values[1, i] for i in range(*table.layout.leaf_slice(table.layout.leaves.index(leaf)).indices(125))]
        n = len(d)
        s2 = statistics.variance(d)
        mean += weights[leaf] * statistics.fmean(d)
        var += weights[leaf] ** 2 * s2 / n
        pooled += weights[leaf] * s2
        df_den += (weights[leaf] ** 2 * s2 / n) ** 2 / (n - 1)
    t = mean / math.sqrt(var)
    df = var**2 / df_den
    assert result.mean_difference == pytest.approx(mean, rel=1e-12)
    assert result.statistic == pytest.approx(t, rel=1e-10)
    assert result.df == pytest.approx(df, rel=1e-10)
    assert result.p_value == pytest.approx(2 * scipy_stats.t.sf(abs(t), df), rel=1e-9)
    assert result.effect_size == pytest.approx(mean / math.sqrt(pooled), rel=1e-10)
    # The aggregated difference is the difference of the benchmark scores.
    assert result.mean_difference == pytest.approx(table.score(0) - table.score(1), abs=1e-15)


def exact_pvalue(first: list[float], second: list[float], sizes: dict[str, int], weights: dict[str, Fraction]) -> Fraction:
    """Brute force over every sign vector, in exact rational arithmetic on the quantized values."""
    scale = []
    for leaf in sorted(sizes):
        scale += [weights[leaf] / sizes[leaf]] * sizes[leaf]
    d = [Fraction(round(a * QUANTUM) - round(b * QUANTUM), QUANTUM) * w for a, b, w in zip(first, second, scale)]
    observed = abs(sum(d))
    threshold = observed * (1 - Fraction(TIE_TOLERANCE))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=len(d)) if abs(sum(s * x for s, x in zip(signs, d))) >= threshold)
    return Fraction(hits, 2 ** len(d))


@pytest.mark.parametrize("seed", range(4))
def test_randomization_equals_exact_enumeration_on_small_cases(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 9
    # Values on a 1/64 grid, with some equal pairs (zero differences) and ties among |d|.
    a = (rng.integers(0, 65, n) / 64).tolist()
    b = [x if i % 3 == 0 else float(rng.integers(0, 65)) / 64 for i, x in enumerate(a)]
    c = (rng.integers(0, 65, n) / 64).tolist()
    table = table_of([a, b, c])
    assert exact_enumeration(table.layout, 10_000)
    pairs = [(0, 1), (0, 2), (1, 2)]
    got, exact = randomization_pvalues(table, pairs, resamples=10_000, seed=seed)
    assert exact
    rows = [a, b, c]
    for (i, j), p in zip(pairs, got):
        assert p == float(exact_pvalue(rows[i], rows[j], {"t": n}, {"t": Fraction(1)}))


def test_randomization_equals_exact_enumeration_over_grouped_tasks() -> None:
    rng = np.random.default_rng(11)
    sizes = {"a": 3, "b": 4, "c": 5}
    weights = {"a": Fraction(1, 4), "b": Fraction(1, 4), "c": Fraction(1, 2)}
    first = rng.random(12).tolist()
    second = [x if i in (2, 5) else float(v) for i, (x, v) in enumerate(zip(first, rng.random(12)))]
    table = table_of([first, second], sizes, {"G": ["a", "b"]})
    got, exact = randomization_pvalues(table, [(0, 1)], resamples=4096)
    assert exact
    assert got[0] == float(exact_pvalue(first, second, sizes, weights))


def test_identical_entries_are_never_separated() -> None:
    values = np.random.default_rng(3).random(500).tolist()
    table = table_of([values, values])
    p, exact = randomization_pvalues(table, [(0, 1)], resamples=2000)
    assert not exact and p[0] == 1.0


def test_monte_carlo_agrees_with_exact_enumeration_on_larger_cases() -> None:
    rng = np.random.default_rng(5)
    n = 20
    a = rng.random(n)
    b = np.clip(a - rng.normal(0.08, 0.25, n), 0, 1)
    table = table_of([a.tolist(), b.tolist()])
    resamples = 20_000
    (p_mc,), exact = randomization_pvalues(table, [(0, 1)], resamples=resamples, seed=1)
    assert not exact
    # Exact p over all 2**20 sign vectors, with integer sums (independent of the implementation).
    d = (np.rint(table.values[0] * QUANTUM) - np.rint(table.values[1] * QUANTUM)).astype(np.int64)
    vectors = np.arange(1 << n, dtype=np.int64)
    signs = 1 - 2 * ((vectors[:, None] >> np.arange(n)) & 1)
    sums = np.abs(signs @ d)
    p_exact = np.count_nonzero(sums >= abs(int(d.sum()))) / (1 << n)
    assert 0.01 < p_exact < 0.5  # a case where the test is informative
    tolerance = 4 * math.sqrt(p_exact * (1 - p_exact) / resamples) + 1 / resamples
    assert abs(p_mc - p_exact) <= tolerance
    # Fixed seed: the same p-value again; another seed: a different Monte-Carlo draw.
    assert randomization_pvalues(table, [(0, 1)], resamples=resamples, seed=1)[0][0] == p_mc
    assert randomization_pvalues(table, [(0, 1)], resamples=resamples, seed=2)[0][0] != p_mc


def test_layout_orders_tasks_and_queries_by_code_point() -> None:
    layout = Layout.build({"b": ["q2", "q10", "Q1"], "a": ["x"]})
    assert layout.leaves == ("a", "b")
    assert layout.query_ids == (("x",), ("Q1", "q10", "q2"))


def test_exact_enumeration_in_chunks() -> None:
    # 2**17 sign vectors: more than one chunk of the enumeration; against the brute force over integers.
    rng = np.random.default_rng(17)
    a = (rng.integers(0, 17, 17) / 16).tolist()
    b = (rng.integers(0, 17, 17) / 16).tolist()
    table = table_of([a, b])
    (p,), exact = randomization_pvalues(table, [(0, 1)], resamples=1 << 17)
    assert exact
    d = np.array([round(x * 16) - round(y * 16) for x, y in zip(a, b)], dtype=np.int64)
    vectors = np.arange(1 << 17, dtype=np.int64)
    sums = np.abs((1 - 2 * ((vectors[:, None] >> np.arange(17)) & 1)) @ d)
    assert p == np.count_nonzero(sums >= abs(int(d.sum()))) / (1 << 17)
