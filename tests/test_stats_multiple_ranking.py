"""Holm's correction against hand-worked examples; bootstrap ranks, rank intervals and significance groups."""

from __future__ import annotations

import numpy as np
import pytest

from grader.errors import UsageError
from grader.stats.multiple import holm
from grader.stats.ranking import bootstrap_ranks, rank_intervals, significance_groups


def test_holm_hand_worked() -> None:
    # Sorted: 0.005 (x4), 0.01 (x3), 0.03 (x2), 0.04 (x1) -> 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    # Capped at 1: 0.2 (x3) = 0.6, 0.5 (x2) = 1.0, 0.6 (x1) = 0.6 -> 0.6, 1.0, 1.0.
    assert holm([0.5, 0.2, 0.6]).tolist() == pytest.approx([1.0, 0.6, 1.0], abs=1e-15)
    # Ties: 0.01 (x3) = 0.03, 0.01 (x2) = 0.02 -> 0.03, 0.02 (x1) -> 0.03.
    assert holm([0.01, 0.01, 0.02]).tolist() == pytest.approx([0.03, 0.03, 0.03], abs=1e-15)
    # One test: unchanged. None: nothing.
    assert holm([0.2]).tolist() == [0.2]
    assert holm([]).tolist() == []


def test_holm_rejects_what_bonferroni_would_not() -> None:
    p = np.array([0.012, 0.013, 0.02])
    adjusted = holm(p)
    assert np.all(adjusted <= 0.05)  # Holm: 0.036, 0.036, 0.036
    assert np.sum(p * 3 <= 0.05) == 2  # Bonferroni keeps the third


def test_holm_refuses_values_outside_the_unit_interval() -> None:
    with pytest.raises(UsageError):
        holm([0.1, 1.5])
    with pytest.raises(UsageError):
        holm([float("nan")])


def test_bootstrap_ranks_share_the_better_rank_on_ties() -> None:
    replicates = np.array([[0.5, 0.7, 0.5, 0.1], [0.9, 0.1, 0.2, 0.3]])
    assert bootstrap_ranks(replicates).tolist() == [[2, 1, 2, 4], [1, 4, 3, 2]]


def test_rank_intervals_take_the_order_statistics_of_ranks() -> None:
    # 39 resamples: the 95% interval is the minimum and maximum rank (k = 1).
    rng = np.random.default_rng(0)
    base = np.array([0.9, 0.8, 0.1])
    replicates = base + rng.normal(0, 0.01, size=(39, 3))
    replicates[5] = [0.7, 0.75, 0.1]  # once, entry 1 beats entry 0
    low, high = rank_intervals(replicates, 0.95)
    assert low.tolist() == [1, 1, 3] and high.tolist() == [2, 2, 3]
    # With 999 resamples the single swap is outside the 25th..975th order statistics.
    replicates = base + rng.normal(0, 0.01, size=(999, 3))
    replicates[5] = [0.7, 0.75, 0.1]
    low, high = rank_intervals(replicates, 0.95)
    assert low.tolist() == [1, 2, 3] and high.tolist() == [1, 2, 3]


def test_significance_groups_follow_the_leader() -> None:
    order = [0, 1, 2, 3]
    # 1 and 3 are not separable from the leader 0; 2 is.
    adjusted = {(0, 1): 0.2, (0, 2): 0.01, (0, 3): 0.3, (1, 2): 0.5, (1, 3): 0.5, (2, 3): 0.5}
    assert significance_groups(order, adjusted, 0.05) == {0: 1, 1: 1, 3: 1, 2: 2}
    # All separable from 0; then 1 leads a group with 2; 3 is separable from 1.
    adjusted = {(0, 1): 0.01, (0, 2): 0.01, (0, 3): 0.01, (1, 2): 0.2, (1, 3): 0.01, (2, 3): 0.3}
    assert significance_groups(order, adjusted, 0.05) == {0: 1, 1: 2, 2: 2, 3: 3}
    # The boundary: p equal to alpha is not significant.
    assert significance_groups([0, 1], {(0, 1): 0.05}, 0.05) == {0: 1, 1: 1}
    assert significance_groups([4], {}, 0.05) == {4: 1}


def test_compare_groups_ranks_and_corrects_over_all_pairs() -> None:
    from grader.stats.aggregate import ScoreTable
    from grader.stats.compare import compare

    rng = np.random.default_rng(4)
    n = 400
    a = rng.random(n)
    b = np.clip(a + rng.normal(0, 0.05, n), 0, 1)  # indistinguishable from a
    c = np.clip(a - 0.2 + rng.normal(0, 0.05, n), 0, 1)  # far below both
    ids = [f"q{i}" for i in range(n)]
    table = ScoreTable.from_values(["c", "a", "b"], "NDCG@10", [{"t": dict(zip(ids, v.tolist()))} for v in (c, a, b)])
    result = compare(table, resamples=2000, seed=3)
    names = [e.name for e in result.entries]
    assert names[2] == "c" and set(names[:2]) == {"a", "b"}
    groups = {e.name: e.group for e in result.entries}
    assert groups == {"a": 1, "b": 1, "c": 2}
    ranks = {e.name: (e.rank_low, e.rank_high) for e in result.entries}
    assert ranks["c"] == (3, 3) and ranks["a"][0] == 1 and ranks["b"][0] == 1 and ranks["a"][1] <= 2
    assert len(result.pairs) == 3
    raw = [p.randomization_p for p in result.pairs]
    assert [p.randomization_p_holm for p in result.pairs] == holm(raw).tolist()
    assert [p.t_p_holm for p in result.pairs] == holm([p.t_p for p in result.pairs]).tolist()
    assert all(p.mean_difference >= 0 for p in result.pairs)  # each pair is (better, worse)
