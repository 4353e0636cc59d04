"""The Ladder: a new public best only for a significant improvement, released rounded to the margin."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.errors import UsageError
from grader.stats.aggregate import Layout
from grader.stats.ladder import ladder_step, standard_error

ONE = Layout.build({"t": ["a", "b", "c", "d"]})


def test_fixed_step_ladder() -> None:
    first = ladder_step(np.array([0.5, 0.5, 0.25, 0.25]), ONE, step=0.01)  # score 0.375
    assert first.improved and first.released == pytest.approx(0.38)
    # +0.005: within the step, nothing new is shown.
    small = ladder_step(np.array([0.52, 0.5, 0.25, 0.25]), ONE, np.array([0.5, 0.5, 0.25, 0.25]), first.released, step=0.01)
    assert not small.improved and small.released == first.released
    # +0.065 (score 0.44): shown, rounded to the step.
    big = ladder_step(np.array([0.76, 0.5, 0.25, 0.25]), ONE, np.array([0.5, 0.5, 0.25, 0.25]), first.released, step=0.01)
    assert big.improved and big.released == pytest.approx(0.44)
    with pytest.raises(UsageError):
        ladder_step(np.zeros(4), ONE, step=0)


def test_parameter_free_ladder_uses_the_paired_standard_error() -> None:
    best = np.array([0.2, 0.2, 0.2, 0.2])
    new = best + np.array([0.1, 0.3, 0.2, 0.0])
    # d = 0.1, 0.3, 0.2, 0.0: mean 0.15, s = sqrt(0.05 / 3), margin s / sqrt(4).
    margin = math.sqrt(0.05 / 3) / 2
    step = ladder_step(new, ONE, best, 0.2)
    assert step.margin == pytest.approx(margin, rel=1e-12)
    assert step.improved and step.released == pytest.approx(round(0.35 / margin) * margin, rel=1e-12)
    # A gain smaller than its own noise is not shown.
    noisy = best + np.array([0.3, -0.25, 0.2, -0.2])  # mean 0.0125, margin about 0.13
    held = ladder_step(noisy, ONE, best, 0.2)
    assert not held.improved and held.released == 0.2


def test_resubmitting_the_best_never_improves() -> None:
    values = np.array([0.9, 0.1, 0.4, 0.35])
    first = ladder_step(values, ONE)
    assert first.margin == pytest.approx(standard_error(values, ONE))
    again = ladder_step(values.copy(), ONE, values, first.released)
    assert not again.improved and again.released == first.released


def test_margin_follows_the_benchmark_aggregation() -> None:
    layout = Layout.build({"x": ["a", "b"], "y": ["c", "d", "e"]})
    d = np.array([0.1, 0.3, 0.0, 0.2, 0.4])
    # Two ungrouped tasks, weights 1/2: sqrt((1/4) var(x)/2 + (1/4) var(y)/3).
    expected = math.sqrt(0.25 * np.var([0.1, 0.3], ddof=1) / 2 + 0.25 * np.var([0.0, 0.2, 0.4], ddof=1) / 3)
    assert standard_error(d, layout) == pytest.approx(expected, rel=1e-12)
