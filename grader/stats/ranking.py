"""Ranks with uncertainty: each entry's rank interval over bootstrap resamples, and significance groups."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from grader.stats.bootstrap import order_statistic_ranks

#: Resample rows ranked at once: keeps the (rows, entries, entries) comparison array near 8 MiB.
_RANK_CELLS = 1 << 23


def bootstrap_ranks(replicates: np.ndarray) -> np.ndarray:
    """(resamples, entries) ranks: 1 + how many entries score strictly higher on that resample (ties share the better rank)."""
    resamples, entries = replicates.shape
    ranks = np.empty((resamples, entries), dtype=np.int64)
    rows = max(1, _RANK_CELLS // max(1, entries * entries))
    for start in range(0, resamples, rows):
        block = replicates[start : start + rows]
        ranks[start : start + rows] = 1 + np.count_nonzero(block[:, None, :] > block[:, :, None], axis=2)
    return ranks


def rank_intervals(replicates: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Per entry, the percentile interval of its bootstrap rank (same order statistics as the score interval)."""
    ranks = np.sort(bootstrap_ranks(replicates), axis=0)
    low, high = order_statistic_ranks(replicates.shape[0], level)
    return ranks[low - 1], ranks[high - 1]


def significance_groups(order: Sequence[int], adjusted: Mapping[tuple[int, int], float], alpha: float = 0.05) -> dict[int, int]:
    """Group number (1 = the leader's) of each entry of ``order`` (best first).

    The best entry not yet grouped leads a new group; every ungrouped entry whose
    adjusted p-value against that leader is >= ``alpha`` (not separable from it)
    joins it. Repeat until every entry has a group. ``adjusted`` holds the p-value
    of each pair (better, worse) as listed in ``order``.
    """
    groups: dict[int, int] = {}
    remaining = list(order)
    number = 0
    while remaining:
        number += 1
        leader, rest = remaining[0], remaining[1:]
        members = [leader] + [entry for entry in rest if _pair_p(adjusted, leader, entry) >= alpha]
        for entry in members:
            groups[entry] = number
        remaining = [entry for entry in rest if entry not in groups]
    return groups


def _pair_p(adjusted: Mapping[tuple[int, int], float], a: int, b: int) -> float:
    if (a, b) in adjusted:
        return adjusted[(a, b)]
    return adjusted[(b, a)]
