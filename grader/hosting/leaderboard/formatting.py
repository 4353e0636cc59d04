"""How the leaderboard pages print numbers, dates and model facts (Jinja filters; the JSON and CSV keep the values).

Published numbers are rounded to 4 decimals (:data:`grader.hosting.leaderboard.service.DECIMALS`),
so a p-value that rounds to 0 was below 0.00005: it is printed ``< 0.0001``, never
``0.0``. Dates are UTC ISO 8601 strings in the data; a page shows them as
``2026-12-01 01:49`` inside ``<time datetime="...">``, which keeps the exact value.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

DECIMALS = 4
#: The smallest p-value printed as a number; anything below shows as "< 0.0001".
SMALLEST_PRINTED = 10.0**-DECIMALS

#: Short names of model-card facts on the board (the legend and docs/leaderboard.md spell them out).
FACT_LABELS = {
    "base_model": "base",
    "parameters": "params",
    "dimension": "dim",
    "max_length": "max len",
    "pooling": "pooling",
    "license": "licence",
    "revision": "rev",
}


def p_value(value: float | None) -> str:
    """A (Holm-corrected) p-value as printed: 4 decimals, ``< 0.0001`` below that, empty when unknown."""
    if value is None:
        return ""
    if value < SMALLEST_PRINTED / 2:  # rounds to 0.0000 at the printed precision
        return f"< {SMALLEST_PRINTED:.{DECIMALS}f}"
    return f"{value:.{DECIMALS}f}"


def number(value: float | None, decimals: int = DECIMALS) -> str:
    """A score, difference or effect size with a fixed number of decimals; empty when unknown."""
    return "" if value is None else f"{value:.{decimals}f}"


def when(value: str | None) -> str:
    """``2026-12-01T01:49:20Z`` -> ``2026-12-01 01:49`` (UTC; the exact value stays in ``<time datetime>``)."""
    if not value:
        return ""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return moment.strftime("%Y-%m-%d %H:%M")


def fact_label(key: str) -> str:
    """The short label of a model-card fact."""
    return FACT_LABELS.get(key, key.replace("_", " "))


def fact_value(key: str, value: Any) -> str:
    """A model-card fact as shown: parameter counts in millions or billions, the rest as given."""
    if key == "parameters" and isinstance(value, int) and not isinstance(value, bool):
        if value >= 1_000_000_000:
            return f"{value / 1e9:.1f}B"
        if value >= 1_000_000:
            return f"{value / 1e6:.1f}M"
        return f"{value:,}"
    return str(value)


#: The filters the page templates use (registered on the Jinja environment of grader.hosting.api.routes.web).
FILTERS = {"p_value": p_value, "number": number, "when": when, "fact_label": fact_label, "fact_value": fact_value}
