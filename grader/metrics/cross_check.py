"""``--cross-check``: the same run scored by pytrec_eval (trec_eval) and by the grader's own ``coir`` policy.

pytrec_eval is the reference the grader's metrics are built to reproduce; this lets a user see that they do,
on their own data. The comparison is per query and per measure, on the measures pytrec_eval has (those with a trec_eval name,
:attr:`grader.metrics.measures.Measure.trec_name`: ``ndcg_cut_10`` ...; MRR@k is not one of them: trec_eval's
``recip_rank`` has no cut-off), and any difference beyond :data:`TOLERANCE` is an error.

The ``coir`` policy is the grader's reading of a run that pytrec_eval shares (BEIR's): a document whose id
is its query's is dropped, scores are ranked as float32, and only the judged queries present in the run
count. The default ``strict`` policy differs on purpose (a judged query the run omits scores 0, scores rank
as float64), so a report's ``strict`` numbers are not comparable to pytrec_eval's: :data:`STRICT_NOTE`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytrec_eval

from grader.errors import CrossCheckError, UsageError
from grader.metrics.measures import Measure
from grader.metrics.policy import RELEVANCE_LEVEL, Policy, evaluate
from grader.runs.run import Run

#: The largest difference allowed between the grader's value and pytrec_eval's, per query and measure.
TOLERANCE = 1e-12
#: How many differences an error quotes.
_QUOTED = 3

STRICT_NOTE = (
    "the cross-check compares pytrec_eval with the grader's coir policy; a report's strict numbers (the default policy) "
    "are not comparable to pytrec_eval's: strict scores a judged query the run omits as 0 and ranks scores as float64"
)


@dataclass(frozen=True)
class CrossCheck:
    """A cross-check that passed: what was compared and the largest difference seen."""

    measures: tuple[Measure, ...]
    #: requested measures pytrec_eval does not have (MRR@k), not compared
    skipped: tuple[Measure, ...]
    queries: int
    largest: float

    def summary(self, where: str = "") -> str:
        """One line saying what agreed with pytrec_eval, and what was not compared."""
        prefix = f"{where}: " if where else ""
        line = (
            f"{prefix}cross-check passed: {len(self.measures)} measure(s) x {self.queries} queries agree with pytrec_eval "
            f"(coir policy; largest difference {self.largest:.1e}, tolerance {TOLERANCE:g})"
        )
        if self.skipped:
            line += f"; not in pytrec_eval at a cut-off, not compared: {', '.join(str(m) for m in self.skipped)}"
        return line


def pytrec_name(measure: Measure) -> str | None:
    """pytrec_eval's output key for ``measure`` (trec_eval's name, ``ndcg_cut_10``), or None when pytrec_eval does not have it."""
    return measure.trec_name


def pytrec_per_query(
    qrels: Mapping[str, Mapping[str, int]], run: Run, measures: Sequence[Measure], relevance_level: int = RELEVANCE_LEVEL
) -> dict[str, dict[str, float]]:
    """pytrec_eval's per-query values of ``measures`` for ``run``, read as BEIR reads it (a query's own id dropped)."""
    cutoffs: dict[str, set[int]] = {}
    for measure in measures:
        family = str(pytrec_name(measure)).rsplit("_", 1)[0]  # ndcg_cut_10 -> ndcg_cut, asked for as ndcg_cut.10
        cutoffs.setdefault(family, set()).add(measure.cutoff)
    wanted = {f"{family}.{','.join(str(k) for k in sorted(ks))}" for family, ks in cutoffs.items()}
    judged = {query: {doc: int(grade) for doc, grade in docs.items()} for query, docs in qrels.items()}
    rankings = {query: {doc: score for doc, score in run.ranking(query) if doc != query} for query in run.query_ids}
    return pytrec_eval.RelevanceEvaluator(judged, wanted, relevance_level=relevance_level).evaluate(rankings)  # type: ignore[no-any-return]


def cross_check(
    qrels: Mapping[str, Mapping[str, int]], run: Run, measures: Sequence[Measure], *, relevance_level: int = RELEVANCE_LEVEL
) -> CrossCheck:
    """Score ``run`` with pytrec_eval and with the ``coir`` policy; raise :class:`CrossCheckError` where they differ.

    Both must evaluate the same queries, and each value (and each mean) must agree within :data:`TOLERANCE`.
    """
    compared = tuple(m for m in measures if pytrec_name(m) is not None)
    skipped = tuple(m for m in measures if pytrec_name(m) is None)
    if not compared:
        raise UsageError("--cross-check: none of the measures is one pytrec_eval has at a cut-off", hint="add one of NDCG@k, MAP@k, Recall@k, P@k")
    ours = evaluate(qrels, run, compared, Policy.COIR, relevance_level=relevance_level)
    theirs = pytrec_per_query(qrels, run, compared, relevance_level)
    our_values = ours.per_query.as_dict()
    if set(our_values) != set(theirs):
        only_ours, only_theirs = sorted(set(our_values) - set(theirs)), sorted(set(theirs) - set(our_values))
        raise CrossCheckError(
            f"cross-check failed: the grader evaluated {len(our_values)} queries, pytrec_eval {len(theirs)} "
            f"(only the grader: {only_ours[:_QUOTED]}; only pytrec_eval: {only_theirs[:_QUOTED]})"
        )
    differences: list[tuple[float, str, str, float, float]] = []
    largest = 0.0
    for measure in compared:
        name, key = str(measure), pytrec_name(measure)
        for query, row in our_values.items():
            mine, reference = row[name], theirs[query][key]  # type: ignore[index]
            gap = abs(mine - reference)
            largest = max(largest, gap)
            if not gap <= TOLERANCE:
                differences.append((gap, name, query, mine, reference))
        if our_values:
            reference_mean = math.fsum(theirs[q][key] for q in our_values) / len(our_values)  # type: ignore[index]
            gap = abs(ours.mean(measure) - reference_mean)
            largest = max(largest, gap)
            if not gap <= TOLERANCE:
                differences.append((gap, name, "(mean)", ours.mean(measure), reference_mean))
    if differences:
        differences.sort(key=lambda d: (-d[0], d[1], d[2]))
        quoted = "; ".join(f"{m} query {q!r}: grader {a!r}, pytrec_eval {b!r}" for _, m, q, a, b in differences[:_QUOTED])
        raise CrossCheckError(
            f"cross-check failed: {len(differences)} value(s) differ from pytrec_eval by more than {TOLERANCE:g} "
            f"(largest {differences[0][0]:.3e}): {quoted}"
        )
    return CrossCheck(compared, skipped, len(our_values), largest)
