"""Holm's step-down correction for a family of p-values (Holm, Scand. J. Statist. 1979)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grader.errors import UsageError


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values, in the input's order.

    Sorted ascending p_(1) <= ... <= p_(m): adjusted p_(i) = max over j <= i of
    min(1, (m - j + 1) p_(j)). Rejecting where the adjusted value is <= alpha
    controls the family-wise error rate at alpha. Ties keep their input order
    (a stable sort), which does not change the adjusted values.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise UsageError("p-values must be one-dimensional")
    if np.any((p < 0) | (p > 1) | ~np.isfinite(p)):
        raise UsageError("p-values must lie in [0, 1]")
    m = p.shape[0]
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m, dtype=np.float64)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted
