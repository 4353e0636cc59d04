"""A deliberately simple, pure-Python float64 reference for the five measure families.

Written from trec_eval's definitions (relevance level 1), independently of the
engine, so tests can check the engine where pytrec_eval cannot serve as oracle
(pytrec-eval-terrier rounds scores to float32 before ranking):

* rank by score descending, ties by document id descending, byte-wise (UTF-8);
* a document is relevant when its judgement is >= 1; its gain is the judgement;
  judgements <= 0 (and unjudged documents) have gain 0;
* NDCG@k: DCG of the top k over the DCG of the ideal ranking of *all* judged
  relevant documents, cut at k; discount log2(rank + 1) with 1-based ranks;
* MAP@k: sum of precision at each relevant document within the top k, over the
  number of relevant documents;
* Recall@k: relevant in the top k over the number of relevant documents;
* P@k: relevant in the top k over k (not over the list length);
* MRR@k: 1 / rank of the first relevant document when that rank is <= k, else 0.

A query with no relevant judgement scores 0 everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

FAMILIES = ("NDCG", "MAP", "Recall", "P", "MRR")
CUTOFFS = (1, 3, 5, 10, 100, 1000)


def trec_sorted(ranking: Mapping[str, float]) -> list[str]:
    """Document ids in trec_eval order: score descending, then id descending byte-wise."""
    items = list(ranking.items())
    # Two stable sorts: the secondary key first (id descending), then the primary one.
    by_id = sorted(items, key=lambda x: x[0].encode("utf-8"), reverse=True)
    by_score = sorted(by_id, key=lambda x: -x[1])
    return [doc for doc, _ in by_score]


def query_measures(
    judgements: Mapping[str, int],
    ranking: Mapping[str, float],
    cutoffs: Iterable[int] = CUTOFFS,
) -> dict[str, float]:
    """All families at all ``cutoffs`` for one query, keyed ``"NDCG@10"`` etc."""
    cutoffs = tuple(cutoffs)
    docs = trec_sorted(ranking)
    relevant_gains = sorted((rel for rel in judgements.values() if rel >= 1), reverse=True)
    n_relevant = len(relevant_gains)
    out: dict[str, float] = {}
    for k in cutoffs:
        top = docs[:k]
        rels = [judgements.get(doc, 0) for doc in top]
        hits = [rel >= 1 for rel in rels]
        if n_relevant == 0:
            for family in FAMILIES:
                out[f"{family}@{k}"] = 0.0
            continue
        dcg = 0.0
        for i, rel in enumerate(rels):
            if rel >= 1:
                dcg += rel / math.log2(i + 2)
        idcg = 0.0
        for i, gain in enumerate(relevant_gains[:k]):
            idcg += gain / math.log2(i + 2)
        out[f"NDCG@{k}"] = dcg / idcg if idcg > 0 else 0.0

        precision_sum = 0.0
        found = 0
        for i, hit in enumerate(hits):
            if hit:
                found += 1
                precision_sum += found / (i + 1)
        out[f"MAP@{k}"] = precision_sum / n_relevant
        out[f"Recall@{k}"] = found / n_relevant
        out[f"P@{k}"] = found / k

        first = next((i for i, hit in enumerate(hits) if hit), None)
        out[f"MRR@{k}"] = 0.0 if first is None else 1.0 / (first + 1)
    return out


def evaluate_reference(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    cutoffs: Iterable[int] = CUTOFFS,
) -> dict[str, dict[str, float]]:
    """Per-query measures for every query of ``qrels`` (a query absent from ``run`` ranks nothing)."""
    cutoffs = tuple(cutoffs)
    return {qid: query_measures(judged, run.get(qid, {}), cutoffs) for qid, judged in qrels.items()}
