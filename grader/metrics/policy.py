"""Aggregation policies: which queries count, and how a run is read, before averaging.

``strict`` (the default) averages over every judged query: a query the run omits,
or ranks nothing for, scores 0, so skipping hard queries never pays. Scores are
ranked as float64, as trec_eval 10 does.

``coir`` reproduces coir-eval 0.7 / BEIR ``EvaluateRetrieval.evaluate`` exactly:
only judged queries present in the run are averaged (present with an empty ranking
counts as 0), a document whose id equals the query id is removed from the run (not
from the judgements), and scores are rounded to float32 before ranking, as
pytrec-eval-terrier does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grader.errors import UsageError
from grader.metrics.measures import Measure
from grader.metrics.per_query import RELEVANCE_LEVEL, PerQuery, per_query_measures, select_rankings
from grader.metrics.policy_name import Policy
from grader.runs.run import Run


@dataclass(frozen=True)
class QueryCounts:
    """How the run covers the judged queries."""

    judged: int
    answered: int
    missing: int
    extra: int
    evaluated: int

    def as_dict(self) -> dict[str, int]:
        return {"judged": self.judged, "answered": self.answered, "missing": self.missing, "extra": self.extra}


@dataclass(frozen=True)
class Evaluation:
    """Per-query values, their means, and the query accounting of one run."""

    policy: Policy
    measures: tuple[Measure, ...]
    per_query: PerQuery
    counts: QueryCounts
    relevance_level: int = RELEVANCE_LEVEL

    def mean(self, measure: Measure) -> float:
        """Mean over evaluated queries; exactly rounded (``math.fsum``), so order-independent."""
        column = self.per_query.values[measure]
        if len(column) == 0:
            return 0.0
        return math.fsum(column.tolist()) / len(column)

    def means(self) -> dict[str, float]:
        """``{"NDCG@10": mean, ...}`` in measure order."""
        return {str(measure): self.mean(measure) for measure in self.measures}


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Run,
    measures: Sequence[Measure],
    policy: Policy = Policy.STRICT,
    *,
    relevance_level: int = RELEVANCE_LEVEL,
) -> Evaluation:
    """Score ``run`` against ``qrels`` under ``policy``.

    ``relevance_level`` is trec_eval's ``-l``: the least judgement counted as relevant
    by every measure but NDCG (whose gains are the judgements); 1 for every benchmark.
    """
    # A query with an empty set of judgements is not judged at all (pytrec_eval drops it too).
    judged = [q for q, docs in qrels.items() if docs]
    if not judged:
        raise UsageError("the judgements contain no query")
    judged_set = set(judged)
    in_run = run.query_index
    answered = [q for q in judged if q in in_run and _ranked_anything(run, in_run[q])]
    present = [q for q in judged if q in in_run]
    extra = sum(1 for q in run.query_ids if q not in judged_set)
    if policy is Policy.STRICT:
        query_ids: list[str] = judged
        rankings = select_rankings(run, query_ids, float32_scores=False, drop_identical_ids=False)
    elif policy is Policy.COIR:
        query_ids = present
        rankings = select_rankings(run, query_ids, float32_scores=True, drop_identical_ids=True)
    else:  # pragma: no cover - exhaustive over Policy
        raise AssertionError(policy)
    per_query = per_query_measures(qrels, query_ids, rankings, run, measures, relevance_level=relevance_level)
    counts = QueryCounts(
        judged=len(judged),
        answered=len(answered),
        missing=len(judged) - len(answered),
        extra=extra,
        evaluated=len(query_ids),
    )
    return Evaluation(policy, tuple(measures), per_query, counts, relevance_level)


def _ranked_anything(run: Run, index: int) -> bool:
    return bool(run.offsets[index + 1] > run.offsets[index])
