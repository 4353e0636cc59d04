"""The bootstrap: the specified resampling, identical under a fixed seed, and covering the true mean at the nominal rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.errors import UsageError
from grader.stats.bootstrap import bootstrap_scores, order_statistic_ranks, percentile_interval
from grader.stats.draws import BOOTSTRAP, WordStream, stream_id
from tests.stats_support import table_of


def naive_replicates(table, resamples: int, seed: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The written procedure, one query at a time: index floor(w n / 2**64), leaf means, the benchmark's aggregation."""
    layout = table.layout
    streams = [WordStream(seed, stream_id(BOOTSTRAP, leaf)) for leaf in range(len(layout.leaves))]
    out = np.empty((resamples, len(table.names)))
    spec = layout.spec(table.measure)
    for b in range(resamples):
        drawn = {}
        for leaf, name in enumerate(layout.leaves):
            n = int(layout.sizes[leaf])
            drawn[name] = [(int(w) * n) >> 64 for w in streams[leaf].words(n)]
        for row in range(len(table.names)):
            means = {}
            for leaf, name in enumerate(layout.leaves):
                column = table.values[row, layout.leaf_slice(leaf)]
                means[name] = math.fsum(column[i] for i in drawn[name]) / len(drawn[name])
            out[b, row] = spec.aggregate(means)["score"]
    return out


def test_bootstrap_is_the_specified_procedure_with_groups() -> None:
    rng = np.random.default_rng(0)
    sizes = {"a": 7, "b": 5, "c": 11}
    rows = [rng.random(23).tolist() for _ in range(3)]
    table = table_of(rows, sizes, {"G": ["a", "b"]})
    got = bootstrap_scores(table, resamples=37, seed=42)
    # Values are quantized to 2**-32 before resampling: agreement to ~1e-10, not to the last bit.
    np.testing.assert_allclose(got, naive_replicates(table, 37, 42), rtol=0, atol=1e-9)


def test_bootstrap_is_identical_under_a_fixed_seed_and_changes_with_it() -> None:
    rng = np.random.default_rng(1)
    table = table_of([rng.random(3000).tolist(), rng.random(3000).tolist()], {"x": 1000, "y": 2000})
    first = bootstrap_scores(table, resamples=500, seed=7)
    assert first.tobytes() == bootstrap_scores(table, resamples=500, seed=7).tobytes()
    assert not np.array_equal(first, bootstrap_scores(table, resamples=500, seed=8))
    # The first resamples do not depend on how many follow (chunking is invisible).
    assert first[:100].tobytes() == bootstrap_scores(table, resamples=100, seed=7).tobytes()


def test_entries_share_the_resamples() -> None:
    values = np.random.default_rng(2).random(400).tolist()
    table = table_of([values, values, [v / 2 for v in values]])
    replicates = bootstrap_scores(table, resamples=300, seed=0)
    assert np.array_equal(replicates[:, 0], replicates[:, 1])
    np.testing.assert_allclose(replicates[:, 2], replicates[:, 0] / 2, atol=1e-12)


def test_percentile_interval_takes_the_specified_order_statistics() -> None:
    assert order_statistic_ranks(10_000, 0.95) == (250, 9751)
    assert order_statistic_ranks(999, 0.95) == (25, 975)
    assert order_statistic_ranks(39, 0.95) == (1, 39)
    with pytest.raises(UsageError, match="too few"):
        order_statistic_ranks(38, 0.95)
    replicates = np.random.default_rng(3).permutation(np.arange(1.0, 1000.0))[:, None]
    low, high = percentile_interval(replicates, 0.95)
    assert (low[0], high[0]) == (25.0, 975.0)


def test_bootstrap_interval_covers_the_true_mean_at_the_nominal_rate() -> None:
    """Simulated per-query values from Beta(2, 5) (true mean 2/7), 120 queries, 400 data sets, 999 resamples each.

    Percentile intervals of the mean at this size cover slightly less than
    nominal; the tolerance accepts 0.90..0.98 (the binomial s.d. of the
    observed rate over 400 data sets is 0.011), so a bias of a few points or a
    wrong quantile (e.g. a 90% interval: ~0.89) fails.
    """
    rng = np.random.default_rng(2024)
    true_mean = 2 / 7
    trials, n = 400, 120
    data = rng.beta(2, 5, size=(trials, n))
    # All data sets as entries of one table: each gets its own column on the same (independent of data) resamples.
    table = table_of(data.tolist())
    low, high = percentile_interval(bootstrap_scores(table, resamples=999, seed=5), 0.95)
    coverage = float(np.mean((low <= true_mean) & (true_mean <= high)))
    assert 0.90 <= coverage <= 0.98, coverage
    low90, high90 = percentile_interval(bootstrap_scores(table, resamples=999, seed=5), 0.90)
    assert float(np.mean((low90 <= true_mean) & (true_mean <= high90))) < coverage
