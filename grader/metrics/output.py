"""Presentations of an :class:`Evaluation`: table, JSON, CoIR's shape, per-query TSV."""

from __future__ import annotations

from typing import Any

from grader import jsonio
from grader.metrics.measures import Family
from grader.metrics.per_query import RELEVANCE_LEVEL
from grader.metrics.policy import Evaluation

# CoIR / BEIR group names of each family in their output dictionary (a family they lack: its own name).
_COIR_GROUP = {Family.NDCG: "NDCG", Family.MAP: "MAP", Family.RECALL: "Recall", Family.P: "Precision", Family.MRR: "MRR"}


def as_json(evaluation: Evaluation) -> dict[str, Any]:
    """``{"policy", "n_queries", "queries", "measures"}`` at full float precision.

    ``"relevance_level"`` is added when it is not the default 1 (trec_eval's ``-l``).
    """
    data: dict[str, Any] = {
        "policy": evaluation.policy.value,
        "n_queries": evaluation.counts.evaluated,
        "queries": evaluation.counts.as_dict(),
        "measures": evaluation.means(),
    }
    if evaluation.relevance_level != RELEVANCE_LEVEL:
        data["relevance_level"] = evaluation.relevance_level
    return data


def as_coir(evaluation: Evaluation) -> dict[str, Any]:
    """CoIR's result shape ``{"metrics": {"NDCG": {"NDCG@1": ...}, ...}}``, rounded to 5 decimals as BEIR does."""
    metrics: dict[str, dict[str, float]] = {}
    for measure in evaluation.measures:
        metrics.setdefault(_COIR_GROUP.get(measure.family, measure.family.value), {})[str(measure)] = round(evaluation.mean(measure), 5)
    return {"metrics": metrics}


def as_table(evaluation: Evaluation) -> str:
    """A plain two-column table, then one line of query accounting."""
    means = evaluation.means()
    width = max(len(name) for name in means) if means else 7
    lines = [f"{'measure':<{width}}  value"]
    lines += [f"{name:<{width}}  {value:.6f}" for name, value in means.items()]
    counts = evaluation.counts
    level = "" if evaluation.relevance_level == RELEVANCE_LEVEL else f", relevant from judgement {evaluation.relevance_level}"
    lines.append(
        f"policy {evaluation.policy.value}{level}: {counts.evaluated} queries averaged; "
        f"{counts.judged} judged, {counts.answered} answered, {counts.missing} missing, {counts.extra} not judged (ignored)"
    )
    return "\n".join(lines) + "\n"


def per_query_tsv(evaluation: Evaluation) -> str:
    """``query-id<TAB>measure...`` header, then one line per evaluated query (full precision)."""
    names = [str(measure) for measure in evaluation.measures]
    columns = [evaluation.per_query.values[measure] for measure in evaluation.measures]
    lines = ["\t".join(["query-id", *names])]
    for i, query_id in enumerate(evaluation.per_query.query_ids):
        lines.append("\t".join([query_id, *(repr(float(column[i])) for column in columns)]))
    return "\n".join(lines) + "\n"


def dumps(data: Any) -> str:
    """JSON text with full float precision; NaN is impossible here and refused."""
    return jsonio.dumps(data, indent=2, ensure_ascii=True) + "\n"
