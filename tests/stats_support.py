"""Helpers of the statistics tests: score tables built from plain rows."""

from __future__ import annotations

from grader.stats.aggregate import ScoreTable


def table_of(rows: list[list[float]], leaves: dict[str, int] | None = None, groups: dict[str, list[str]] | None = None) -> ScoreTable:
    """A table of entries ``rows`` (values in layout order) over leaves of the given sizes (one leaf by default)."""
    leaves = leaves or {"t": len(rows[0])}
    per_entry = []
    for row in rows:
        entry, start = {}, 0
        for leaf in sorted(leaves):
            size = leaves[leaf]
            entry[leaf] = {f"q{i:05d}": row[start + i] for i in range(size)}
            start += size
        per_entry.append(entry)
    return ScoreTable.from_values([f"e{i}" for i in range(len(rows))], "NDCG@10", per_entry, groups)
