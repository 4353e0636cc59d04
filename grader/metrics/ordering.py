"""Moved to :mod:`grader.runs.ordering` (runs and metrics both use it; metrics sits above runs).

Re-exported here only until the retrieval and effect packages import the new place.
"""

from __future__ import annotations

from grader.runs.ordering import byte_order_ranks, first_repeat, order_in_place, segment_ids, segment_of, trec_order

__all__ = ["byte_order_ranks", "first_repeat", "order_in_place", "segment_ids", "segment_of", "trec_order"]
