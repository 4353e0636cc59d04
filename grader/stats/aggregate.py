"""Per-query values of several entries laid out for resampling, and the benchmark's own aggregation over them.

A benchmark score is a mean of means: each task ("leaf") averages its queries,
each group averages its member tasks (CoIR: the six CodeSearchNet languages),
and the score averages the groups and ungrouped tasks. That is linear in the
per-query values, so query q of leaf l weighs ``W_l / n_l`` where ``W_l =
1 / (units * members of l's unit)``; a resample that draws query q ``c_q``
times scores ``sum_l W_l / n_l * sum_q c_q v_q``. Resampling happens within
each leaf, so every leaf keeps its size and weight.

The point score is not computed from the weights but by
:meth:`grader.data.benchmark.BenchmarkSpec.aggregate` over ``math.fsum``
means, exactly as the report's own score was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from grader.data.benchmark import BenchmarkSpec
from grader.errors import UsageError
from grader.reports.dsse import quote_untrusted

#: Resampled sums use values rounded to multiples of 2**-32: with counts below 2**21 every partial
#: sum is an integer below 2**53, so float64 sums are exact in any order (any BLAS, threads, CPU).
QUANTUM_BITS = 32
#: Largest leaf the exactness argument covers.
MAX_LEAF_QUERIES = (1 << 21) - 1


@dataclass(frozen=True)
class Layout:
    """The query axis: leaves in code-point order of their names, each leaf's query ids in code-point order."""

    leaves: tuple[str, ...]
    query_ids: tuple[tuple[str, ...], ...]
    #: group name -> member leaves; leaves in no group are units of their own
    groups: Mapping[str, tuple[str, ...]]

    @classmethod
    def build(cls, query_ids: Mapping[str, Sequence[str]], groups: Mapping[str, Sequence[str]] | None = None) -> Layout:
        """The layout of ``{leaf: query ids}`` (any order; sorted here) with ``groups`` of leaves."""
        leaves = tuple(sorted(query_ids))
        if not leaves:
            raise UsageError("nothing to compare: no task")
        ids = []
        for leaf in leaves:
            ordered = tuple(sorted(query_ids[leaf]))
            if not ordered:
                raise UsageError(f"task {leaf!r} has no query")
            if len(set(ordered)) != len(ordered):
                raise UsageError(f"task {leaf!r} lists a query twice")
            ids.append(ordered)
        clean_groups: dict[str, tuple[str, ...]] = {}
        seen: set[str] = set()
        for group, members in sorted((groups or {}).items()):
            present = tuple(sorted(members))
            unknown = [m for m in present if m not in query_ids]
            if unknown:
                raise UsageError(f"group {group!r} names task {unknown[0]!r}, which is not compared")
            if seen & set(present) or group in query_ids:
                raise UsageError(f"group {group!r} overlaps another group or task")
            seen.update(present)
            if present:
                clean_groups[group] = present
        return cls(leaves, tuple(ids), clean_groups)

    @cached_property
    def sizes(self) -> np.ndarray:
        """Queries per leaf."""
        return np.array([len(ids) for ids in self.query_ids], dtype=np.int64)

    @cached_property
    def offsets(self) -> np.ndarray:
        """Leaf l occupies columns ``offsets[l]:offsets[l+1]`` of the query axis."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    @property
    def total(self) -> int:
        """Queries over all leaves."""
        return int(self.offsets[-1])

    def leaf_slice(self, leaf: int) -> slice:
        """Columns of leaf number ``leaf``."""
        return slice(int(self.offsets[leaf]), int(self.offsets[leaf + 1]))

    @cached_property
    def units(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(unit, member leaves): each group, then each ungrouped leaf."""
        grouped = {leaf for members in self.groups.values() for leaf in members}
        return tuple(self.groups.items()) + tuple((leaf, (leaf,)) for leaf in self.leaves if leaf not in grouped)

    @cached_property
    def leaf_weights(self) -> np.ndarray:
        """``W_l``: the weight of leaf l's mean in the score (they sum to 1)."""
        weight = {leaf: 1.0 / (len(self.units) * len(members)) for _, members in self.units for leaf in members}
        return np.array([weight[leaf] for leaf in self.leaves], dtype=np.float64)

    @cached_property
    def query_weights(self) -> np.ndarray:
        """``W_l / n_l`` for every query of the axis."""
        return np.repeat(self.leaf_weights / self.sizes, self.sizes)

    def spec(self, measure: str) -> BenchmarkSpec:
        """A benchmark spec with these leaves and groups, whose ``aggregate`` is the benchmark's own."""
        return BenchmarkSpec(name="compared", version="-", primary_measure=measure, tasks=self.leaves, groups=dict(self.groups))


@dataclass(frozen=True)
class ScoreTable:
    """Per-query values of the primary measure of several entries over one layout."""

    names: tuple[str, ...]
    measure: str
    layout: Layout
    #: (entries, queries) float64, columns in layout order
    values: np.ndarray

    @classmethod
    def from_values(
        cls,
        names: Sequence[str],
        measure: str,
        per_entry: Sequence[Mapping[str, Mapping[str, float]]],
        groups: Mapping[str, Sequence[str]] | None = None,
    ) -> ScoreTable:
        """A table from each entry's ``{leaf: {query id: value}}``; every entry must cover the same queries."""
        if not per_entry:
            raise UsageError("nothing to compare: no entry")
        if len(names) != len(per_entry):
            raise UsageError("one name per entry")
        first = per_entry[0]
        layout = Layout.build({leaf: list(values) for leaf, values in first.items()}, groups)
        values = np.empty((len(per_entry), layout.total), dtype=np.float64)
        for row, (name, entry) in enumerate(zip(names, per_entry)):
            if set(entry) != set(layout.leaves):
                extra = sorted(set(entry) ^ set(layout.leaves))[0]
                raise UsageError(f"{name} and {names[0]} are not over the same tasks (task {extra!r})")
            for leaf_index, leaf in enumerate(layout.leaves):
                ids = layout.query_ids[leaf_index]
                leaf_values = entry[leaf]
                if len(leaf_values) != len(ids) or any(q not in leaf_values for q in ids):
                    differ = sorted(set(leaf_values) ^ set(ids))
                    raise UsageError(
                        f"{name} and {names[0]} are not over the same queries of task {leaf!r} "
                        f"({len(leaf_values)} vs {len(ids)} queries; e.g. {quote_untrusted(differ[0])} is in only one)"
                    )
                values[row, layout.leaf_slice(leaf_index)] = [leaf_values[q] for q in ids]
        if not np.all(np.isfinite(values)):
            raise UsageError("a per-query value is not a finite number")
        return cls(tuple(names), measure, layout, values)

    def quantized(self) -> np.ndarray:
        """``rint(values * 2**32)`` as float64: exact integers whose sums over a leaf are exact."""
        if np.any(np.abs(self.values) > 1.0):
            raise UsageError("per-query values must lie in [-1, 1] to be resampled exactly")
        if int(self.layout.sizes.max()) > MAX_LEAF_QUERIES:
            raise UsageError(f"a task has more than {MAX_LEAF_QUERIES} queries; resampled sums would not be exact")
        return np.rint(self.values * float(1 << QUANTUM_BITS))

    def leaf_scales(self) -> np.ndarray:
        """Per leaf, ``W_l / n_l / 2**32``: what a leaf's quantized sum is multiplied by in the score."""
        return self.layout.leaf_weights / self.layout.sizes / float(1 << QUANTUM_BITS)

    def leaf_means(self, row: int) -> dict[str, float]:
        """Exactly rounded mean of each leaf (``math.fsum``), as the report's task scores."""
        return {
            leaf: math.fsum(self.values[row, self.layout.leaf_slice(index)].tolist()) / int(self.layout.sizes[index])
            for index, leaf in enumerate(self.layout.leaves)
        }

    def score(self, row: int) -> float:
        """Entry ``row``'s benchmark score by the benchmark's own aggregation."""
        result = self.layout.spec(self.measure).aggregate(self.leaf_means(row))
        return float(result["score"])

    def scores(self) -> np.ndarray:
        """Every entry's benchmark score."""
        return np.array([self.score(row) for row in range(len(self.names))], dtype=np.float64)

    def restrict(self, keep: Mapping[str, Sequence[str] | set[str]]) -> ScoreTable:
        """The table over a subset of queries (e.g. the public part): ``{leaf: query ids to keep}``.

        Leaves left with no query are dropped (and from their groups).
        """
        per_entry: list[dict[str, dict[str, float]]] = [{} for _ in self.names]
        for index, leaf in enumerate(self.layout.leaves):
            wanted = set(keep.get(leaf, ()))
            columns = [(q, self.layout.offsets[index] + i) for i, q in enumerate(self.layout.query_ids[index]) if q in wanted]
            if not columns:
                continue
            for row in range(len(self.names)):
                per_entry[row][leaf] = {q: float(self.values[row, column]) for q, column in columns}
        left = set(per_entry[0])
        groups = {g: [m for m in members if m in left] for g, members in self.layout.groups.items()}
        return ScoreTable.from_values(self.names, self.measure, per_entry, {g: m for g, m in groups.items() if m})
