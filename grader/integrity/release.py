"""What of a contamination audit of a hidden split may be shown: the release rule, in one place.

The audit must not become an oracle. A participant who sketches one candidate text per submission would learn,
from exact counts, whether that text is in the hidden split; on a public benchmark the secret is the partition
itself. So the released figure is one number per task over the **whole** split, coarsened:

* ``n`` = the split's test queries, ``c`` = test queries touched (their text, or a relevant document, found:
  :attr:`SplitOverlap.touched`);
* the **step** ``g = max(MIN_COUNT, ceil(n / LEVELS))``;
* ``c < g``: withheld (shown as "fewer than g"); otherwise released as ``floor(c / g) * g`` test queries and
  that count's share of ``n``.

A text that touches fewer than ``g`` test queries alone therefore changes nothing shown, whether or not it is in
the split. Each release takes one of at most ``floor(n / g) + 1 <= LEVELS + 1`` values per task, so it tells at
most ``log2(floor(n / g) + 1)`` bits about the hidden split (:func:`leakage_bits`; docs/security.md states the
bound over a competition's quota). Nothing else of the comparison (which queries, which documents, the
query/document split of the count) is released.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grader.integrity.contamination import SplitOverlap

#: Fewest touched test queries ever shown (below it: withheld).
MIN_COUNT = 10
#: Most distinct non-withheld values one task's figure can take.
LEVELS = 100


@dataclass(frozen=True)
class ReleasedOverlap:
    """One task's released figure: ``touched`` is ``None`` when withheld (then it is below ``step``)."""

    task: str
    split: str
    test_queries: int
    step: int
    touched: int | None

    @property
    def share(self) -> float | None:
        """The released count's share of the split's test queries (``None`` when withheld or no test query)."""
        if self.touched is None or self.test_queries == 0:
            return None
        return self.touched / self.test_queries

    def as_dict(self) -> dict[str, object]:
        """The figure as JSON-ready values (``touched`` and ``share`` ``None`` when withheld)."""
        share = self.share
        return {
            "task": self.task,
            "split": self.split,
            "test_queries": self.test_queries,
            "step": self.step,
            "touched": self.touched,
            "share": None if share is None else round(share, 4),
        }

    def line(self) -> str:
        """The figure as one line for a person."""
        if self.touched is None:
            return f"{self.task} ({self.split}): fewer than {self.step} of {self.test_queries} test queries touched (withheld below {self.step})"
        return f"{self.task} ({self.split}): at least {self.touched} of {self.test_queries} test queries touched ({self.share:.1%}; counts in steps of {self.step})"


def step(test_queries: int) -> int:
    """The step ``g`` of a split of ``test_queries`` test queries."""
    return max(MIN_COUNT, math.ceil(test_queries / LEVELS))


def release(overlap: SplitOverlap) -> ReleasedOverlap:
    """The figure of ``overlap`` that may be shown to its participant (the rule of the module's doc)."""
    g = step(overlap.test_queries)
    touched = None if overlap.touched < g else (overlap.touched // g) * g
    return ReleasedOverlap(overlap.task, overlap.split, overlap.test_queries, g, touched)


def leakage_bits(test_queries: int) -> float:
    """Most bits one release of a task's figure can carry: ``log2`` of the number of values it can take."""
    return math.log2(test_queries // step(test_queries) + 1)
