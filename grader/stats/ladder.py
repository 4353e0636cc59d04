"""The Ladder (Blum & Hardt, ICML 2015): a public board that moves only on a significant improvement.

Repeatedly submitting and reading the public score lets a participant fit the
public queries. The Ladder releases a new public best only when a submission
beats the participant's previous best by more than a margin, and releases it
rounded to that margin, so small fluctuations carry no information.

* fixed step (Algorithm 1): margin = ``step``;
* parameter-free (Algorithm 2, the default): margin = the standard error of the
  paired difference from the previous best, ``s / sqrt(n)`` on one task
  (s = sample s.d. of the per-query differences), and for several tasks
  ``sqrt(sum_l W_l**2 s_l**2 / n_l)``, the t-test's denominator
  (:func:`grader.stats.paired.paired_t`).

Scores are "higher is better" here (the paper's losses are negated). These are
pure functions: the server keeps, per participant, the per-query values of the
best submission and the released score, and calls :func:`ladder_step` on each
new submission's public per-query values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grader.errors import UsageError
from grader.stats.aggregate import Layout


@dataclass(frozen=True)
class LadderStep:
    """The outcome for one submission: the score to show, whether it is a new best, and the margin used."""

    released: float
    improved: bool
    margin: float


def standard_error(differences: np.ndarray, layout: Layout) -> float:
    """Standard error of the aggregated mean of ``differences`` (layout order): sqrt(sum_l W_l**2 s_l**2 / n_l)."""
    total = 0.0
    for leaf in range(len(layout.leaves)):
        d = differences[layout.leaf_slice(leaf)]
        if d.shape[0] > 1:
            total += float(layout.leaf_weights[leaf]) ** 2 * float(np.var(d, ddof=1)) / d.shape[0]
    return math.sqrt(total)


def aggregated(values: np.ndarray, layout: Layout) -> float:
    """The benchmark score of per-query ``values`` (layout order) by the weighted form of the aggregation."""
    return float(layout.query_weights @ values)


def _round_to(value: float, margin: float) -> float:
    return value if margin <= 0 else round(value / margin) * margin


def ladder_step(
    new_values: np.ndarray,
    layout: Layout,
    best_values: np.ndarray | None = None,
    released: float | None = None,
    *,
    step: float | None = None,
) -> LadderStep:
    """What the board shows after a submission with per-query ``new_values``.

    ``best_values`` and ``released`` are the previous best's values and released
    score (None for a participant's first submission). ``step`` fixes the margin
    (Algorithm 1); None uses the parameter-free margin (Algorithm 2); a first
    submission's margin is the standard error of its own score. The caller
    replaces its stored best by ``new_values`` when ``improved`` is true.
    """
    if step is not None and step <= 0:
        raise UsageError("the Ladder's step must be positive")
    score = aggregated(new_values, layout)
    if best_values is None or released is None:
        margin = step if step is not None else standard_error(new_values, layout)
        return LadderStep(_round_to(score, margin), True, margin)
    margin = step if step is not None else standard_error(new_values - best_values, layout)
    # Beyond the paper: the raw gain over the best must exceed the margin too, so resubmitting the
    # best (differences all 0, margin 0) never "improves" on its own rounded release.
    if score > released + margin and score - aggregated(best_values, layout) > margin:
        return LadderStep(_round_to(score, margin), True, margin)
    return LadderStep(released, False, margin)
