"""Per-query measures with trec_eval's semantics, vectorised over all queries.

The heavy work (ordering, relevance lookup) is one pass over integer and float
arrays; everything after it touches only the relevant retrieved entries, which
are few. Sums run in rank order (``np.bincount`` accumulates sequentially), as
trec_eval's loops do, so results agree with it to the last bits and repeat exactly.

Semantics (trec_eval 9.x/10, relevance level 1):
  * a document is relevant when its judgement is >= 1; gain = judgement if > 0;
  * NDCG@k = sum_{rank i<k} gain_i / log2(i+2), over the same sum for the ideal
    ranking of all judged documents (0 when that is 0);
  * MAP@k = sum over relevant at rank i<k of (relevant so far)/(i+1), / #relevant;
  * Recall@k = relevant in top k / #relevant; P@k = relevant in top k / k;
  * MRR@k = 1/(rank of the first relevant) if within k, else 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from grader.metrics.measures import Family, Measure
from grader.runs.ordering import order_in_place, segment_ids, segment_of
from grader.runs.run import Run

RELEVANCE_LEVEL = 1


@dataclass(frozen=True)
class Rankings:
    """The rankings actually scored: one CSR segment per evaluated query, in trec order."""

    offsets: np.ndarray
    doc_codes: np.ndarray


@dataclass(frozen=True)
class PerQuery:
    """Measure values of every evaluated query, in ``query_ids`` order."""

    query_ids: tuple[str, ...]
    values: Mapping[Measure, np.ndarray]

    def as_dict(self) -> dict[str, dict[str, float]]:
        """``{query_id: {"NDCG@10": value, ...}}``."""
        return {query_id: {str(measure): float(column[i]) for measure, column in self.values.items()} for i, query_id in enumerate(self.query_ids)}


def select_rankings(
    run: Run,
    query_ids: Sequence[str],
    *,
    float32_scores: bool,
    drop_identical_ids: bool,
) -> Rankings:
    """The ranking of each of ``query_ids`` (empty if the run lacks it), in trec order.

    ``float32_scores`` ranks on scores rounded to float32 (as pytrec_eval does);
    ``drop_identical_ids`` removes a document whose id equals the query id (as BEIR does).
    """
    run_index = run.query_index
    source = np.array([run_index.get(q, -1) for q in query_ids], dtype=np.int64)
    present = source >= 0
    lengths = np.zeros(len(query_ids), dtype=np.int64)
    lengths[present] = np.diff(run.offsets)[source[present]]
    offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if np.array_equal(source, np.arange(len(run.query_ids))):
        entries = None  # the run's own layout: no gather needed
    else:
        starts = run.offsets[source[present]]
        entries = np.repeat(starts - offsets[:-1][present], lengths[present]) + np.arange(offsets[-1], dtype=np.int64)
    doc_codes = run.doc_codes if entries is None else run.doc_codes[entries]
    scores = run.scores if entries is None else run.scores[entries]
    if drop_identical_ids:
        vocabulary = _codes_of(run, query_ids)
        query_codes = np.array([vocabulary.get(q, -1) for q in query_ids], dtype=np.int64)
        keep = doc_codes != query_codes[segment_ids(offsets)]
        if not keep.all():
            kept_per_query = np.bincount(segment_ids(offsets)[keep], minlength=len(query_ids))
            doc_codes, scores = doc_codes[keep], scores[keep]
            offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
            np.cumsum(kept_per_query, out=offsets[1:])
    if float32_scores:
        rounded = scores.astype(np.float32).astype(np.float64)
        # Re-order a private copy, chunk by chunk (segments already in order stay untouched).
        doc_codes = doc_codes.copy() if doc_codes is run.doc_codes else doc_codes
        order_in_place(offsets, doc_codes, rounded, run.doc_ranks)
    return Rankings(offsets, doc_codes)


def _codes_of(run: Run, ids: Iterable[str]) -> dict[str, int]:
    """The vocabulary codes of those of ``ids`` the run contains.

    One pass over the vocabulary against the (small) set of wanted ids, instead of
    a ``{doc_id: code}`` dict of the whole vocabulary: a million-document run would
    spend seconds and tens of MiB on that dict to look up a few thousand ids.
    """
    wanted = set(ids)
    if not wanted:
        return {}
    vocab = run.doc_vocab
    found = np.flatnonzero(np.fromiter(map(wanted.__contains__, vocab), dtype=bool, count=len(vocab)))
    return {vocab[code]: int(code) for code in found}


@dataclass(frozen=True)
class _Judgements:
    """What the qrels say about ``query_ids``, in the run's document codes."""

    #: relevant documents per query
    n_relevant: np.ndarray
    #: (query index, gain) of each relevant judgement, gains descending within a query: the ideal ranking
    ideal_query: list[int]
    ideal_gain: list[int]
    #: sorted ``query index * n_vocab + document code`` of the relevant judgements the run could retrieve, and their gains
    keys: np.ndarray
    rels: np.ndarray
    n_vocab: np.int64


def _judgements(qrels: Mapping[str, Mapping[str, int]], query_ids: Sequence[str], run: Run) -> _Judgements:
    """Count of relevant per query, ideal gains, and (query, code) keys of judged documents the run could have retrieved."""
    n_queries = len(query_ids)
    vocabulary = _codes_of(run, (doc_id for query_id in query_ids for doc_id in qrels.get(query_id, ())))
    n_vocab = np.int64(max(len(run.doc_vocab), 1))
    n_relevant = np.zeros(n_queries, dtype=np.int64)
    ideal_query: list[int] = []
    ideal_gain: list[int] = []
    judged_keys: list[int] = []
    judged_rels: list[int] = []
    for qi, query_id in enumerate(query_ids):
        docs = qrels.get(query_id)
        if not docs:
            continue
        positive = sorted((rel for rel in docs.values() if rel >= RELEVANCE_LEVEL), reverse=True)
        n_relevant[qi] = len(positive)
        ideal_query.extend([qi] * len(positive))
        ideal_gain.extend(positive)
        for doc_id, rel in docs.items():
            code = vocabulary.get(doc_id)
            if code is not None and rel >= RELEVANCE_LEVEL:
                judged_keys.append(qi * int(n_vocab) + code)
                judged_rels.append(rel)
    keys = np.asarray(judged_keys, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    return _Judgements(n_relevant, ideal_query, ideal_gain, keys[order], np.asarray(judged_rels, dtype=np.int64)[order], n_vocab)


def _retrieved_relevant(judged: _Judgements, rankings: Rankings) -> tuple[np.ndarray, np.ndarray]:
    """The retrieved entries (indexes into ``rankings.doc_codes``) that are relevant, and their gains."""
    offsets, doc_codes = rankings.offsets, rankings.doc_codes
    keys, rels, n_vocab = judged.keys, judged.rels, judged.n_vocab
    relevant_entries = np.empty(0, dtype=np.int64)
    relevant_gain = np.empty(0, dtype=np.float64)
    if len(keys) and len(doc_codes):
        judged_code = np.zeros(int(n_vocab), dtype=bool)
        judged_code[keys % n_vocab] = True
        candidates = np.flatnonzero(judged_code[doc_codes])
        # Queries of the candidates only: a query index per entry would be as large as the run.
        candidate_keys = segment_of(offsets, candidates) * n_vocab + doc_codes[candidates]
        slot = np.minimum(np.searchsorted(keys, candidate_keys), len(keys) - 1)
        hit = keys[slot] == candidate_keys
        relevant_entries = candidates[hit]
        relevant_gain = rels[slot[hit]].astype(np.float64)
    return relevant_entries, relevant_gain


def per_query_measures(
    qrels: Mapping[str, Mapping[str, int]],
    query_ids: Sequence[str],
    rankings: Rankings,
    run: Run,
    measures: Sequence[Measure],
) -> PerQuery:
    """Compute ``measures`` for each of ``query_ids`` from its ranking in ``rankings``.

    A query without judgements, or without relevant judgements, scores 0 everywhere.
    """
    n_queries = len(query_ids)
    judged = _judgements(qrels, query_ids, run)
    n_relevant, ideal_query, ideal_gain = judged.n_relevant, judged.ideal_query, judged.ideal_gain
    offsets = rankings.offsets
    relevant_entries, relevant_gain = _retrieved_relevant(judged, rankings)

    rel_query = segment_of(offsets, relevant_entries)
    rel_position = relevant_entries - offsets[rel_query]  # 0-based rank
    # 1-based count of relevant documents up to and including this one, per query.
    first_of_query = np.searchsorted(rel_query, rel_query, side="left")
    rel_so_far = (np.arange(len(rel_query)) - first_of_query + 1).astype(np.float64)
    discount = np.log2(rel_position.astype(np.float64) + 2.0)

    ideal_q = np.asarray(ideal_query, dtype=np.int64)
    ideal_g = np.asarray(ideal_gain, dtype=np.float64)
    ideal_pos = np.arange(len(ideal_q), dtype=np.int64) - np.searchsorted(ideal_q, ideal_q, side="left")
    ideal_discount = np.log2(ideal_pos.astype(np.float64) + 2.0)

    relevant_count = n_relevant.astype(np.float64)
    has_relevant = n_relevant > 0
    values: dict[Measure, np.ndarray] = {}
    for measure in measures:
        k = measure.cutoff
        within = rel_position < k
        q = rel_query[within]
        if measure.family is Family.P:
            values[measure] = np.bincount(q, minlength=n_queries).astype(np.float64) / k
        elif measure.family is Family.RECALL:
            hits = np.bincount(q, minlength=n_queries).astype(np.float64)
            values[measure] = np.divide(hits, relevant_count, out=np.zeros(n_queries), where=has_relevant)
        elif measure.family is Family.MAP:
            precision_sum = np.bincount(q, weights=rel_so_far[within] / (rel_position[within] + 1.0), minlength=n_queries)
            values[measure] = np.divide(precision_sum, relevant_count, out=np.zeros(n_queries), where=has_relevant)
        elif measure.family is Family.NDCG:
            dcg = np.bincount(q, weights=relevant_gain[within] / discount[within], minlength=n_queries)
            ideal_within = ideal_pos < k
            idcg = np.bincount(ideal_q[ideal_within], weights=ideal_g[ideal_within] / ideal_discount[ideal_within], minlength=n_queries)
            values[measure] = np.divide(dcg, idcg, out=np.zeros(n_queries), where=idcg > 0)
        elif measure.family is Family.MRR:
            first = rel_so_far == 1.0
            reciprocal = np.zeros(n_queries)
            firsts = first & within
            reciprocal[rel_query[firsts]] = 1.0 / (rel_position[firsts] + 1.0)
            values[measure] = reciprocal
        else:  # pragma: no cover - exhaustive over Family
            raise AssertionError(measure.family)
    return PerQuery(tuple(query_ids), values)
