"""The whole comparison of several entries: intervals, ranks, groups and corrected pairwise tests.

This is what ``grader compare`` prints and what a leaderboard server computes
from stored per-query values; :meth:`Comparison.as_json` is its JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from grader.stats.aggregate import ScoreTable
from grader.stats.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_scores, percentile_interval
from grader.stats.multiple import holm
from grader.stats.paired import all_pairs, exact_enumeration, paired_t, randomization_pvalues
from grader.stats.ranking import rank_intervals, significance_groups

DEFAULT_LEVEL = 0.95
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class EntryResult:
    """One entry: its score, bootstrap interval, rank, rank interval and significance group."""

    name: str
    score: float
    ci_low: float
    ci_high: float
    rank: int
    rank_low: int
    rank_high: int
    group: int


@dataclass(frozen=True)
class PairResult:
    """A paired comparison of ``first`` (the better point score) with ``second``."""

    first: str
    second: str
    mean_difference: float
    effect_size: float | None
    t_statistic: float | None
    t_df: float
    t_p: float
    t_p_holm: float
    randomization_p: float
    randomization_p_holm: float


@dataclass(frozen=True)
class Comparison:
    """Everything computed for a set of entries (entries best first)."""

    measure: str
    tasks: tuple[str, ...]
    groups: dict[str, tuple[str, ...]]
    queries: int
    resamples: int
    seed: int
    level: float
    alpha: float
    randomization_exact: bool
    entries: tuple[EntryResult, ...]
    pairs: tuple[PairResult, ...]

    def as_json(self) -> dict[str, Any]:
        """Plain JSON data (None where a statistic is undefined)."""
        return {
            "measure": self.measure,
            "tasks": list(self.tasks),
            "groups": {group: list(members) for group, members in self.groups.items()},
            "queries": self.queries,
            "method": {
                "resamples": self.resamples,
                "seed": self.seed,
                "confidence_level": self.level,
                "alpha": self.alpha,
                "randomization": "exact enumeration" if self.randomization_exact else "sign-flip Monte Carlo",
                "correction": "holm",
                "random_draws": "Philox4x64-10, docs/statistics.md",
            },
            "entries": [entry.__dict__ for entry in self.entries],
            "pairs": [pair.__dict__ for pair in self.pairs],
        }


def compare(
    table: ScoreTable,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    alpha: float = DEFAULT_ALPHA,
) -> Comparison:
    """Compare every entry of ``table`` with every other.

    Entries are ordered by score, best first (ties keep input order); the family
    of the Holm correction is all pairs; significance groups use the
    Holm-adjusted randomization p-values at ``alpha``.
    """
    scores = table.scores()
    order = sorted(range(len(table.names)), key=lambda row: -scores[row])
    # The count-matrix products are memory-bound: more BLAS threads only contend (results are exact either way).
    with threadpool_limits(limits=1, user_api="blas"):
        return _compare(table, scores, order, resamples=resamples, seed=seed, level=level, alpha=alpha)


def _compare(table: ScoreTable, scores: np.ndarray, order: list[int], *, resamples: int, seed: int, level: float, alpha: float) -> Comparison:
    replicates = bootstrap_scores(table, resamples=resamples, seed=seed)
    low, high = percentile_interval(replicates, level)
    rank_low, rank_high = rank_intervals(replicates, level)
    pairs = all_pairs(order)
    t_tests = [paired_t(table.values[a] - table.values[b], table.layout) for a, b in pairs]
    if pairs:
        randomization, exact = randomization_pvalues(table, pairs, resamples=resamples, seed=seed)
    else:
        randomization, exact = np.zeros(0), exact_enumeration(table.layout, resamples)
    t_holm = holm([test.p_value for test in t_tests])
    randomization_holm = holm(randomization)
    groups = significance_groups(order, {pair: float(p) for pair, p in zip(pairs, randomization_holm)}, alpha)
    entries = tuple(
        EntryResult(
            name=table.names[row],
            score=float(scores[row]),
            ci_low=float(low[row]),
            ci_high=float(high[row]),
            rank=1 + int(np.count_nonzero(scores > scores[row])),
            rank_low=int(rank_low[row]),
            rank_high=int(rank_high[row]),
            group=groups[row],
        )
        for row in order
    )
    pair_results = tuple(
        PairResult(
            first=table.names[a],
            second=table.names[b],
            mean_difference=test.mean_difference,
            effect_size=test.effect_size,
            t_statistic=test.statistic,
            t_df=test.df,
            t_p=test.p_value,
            t_p_holm=float(t_holm[index]),
            randomization_p=float(randomization[index]),
            randomization_p_holm=float(randomization_holm[index]),
        )
        for index, ((a, b), test) in enumerate(zip(pairs, t_tests))
    )
    return Comparison(
        measure=table.measure,
        tasks=table.layout.leaves,
        groups=dict(table.layout.groups),
        queries=table.layout.total,
        resamples=resamples,
        seed=seed,
        level=level,
        alpha=alpha,
        randomization_exact=exact,
        entries=entries,
        pairs=pair_results,
    )
