"""Per-query measures with trec_eval's semantics, vectorised over all queries.

The heavy work (ordering, relevance lookup) is one pass over integer and float
arrays; everything after it touches only the relevant retrieved entries, which
are few. Sums run in rank order (``np.bincount`` accumulates sequentially), as
trec_eval's loops do, so results agree with it to the last bits and repeat exactly.

Semantics (trec_eval 9.x/10; relevance level L, trec_eval's ``-l``, default 1):
  * a document is relevant when its judgement is >= L; gain = judgement if > 0
    (whatever L is, as in trec_eval's ndcg and ndcg_cut);
  * NDCG@k = sum_{rank i<k} gain_i / log2(i+2), over the same sum for the ideal
    ranking of all judged documents (0 when that is 0);
  * MAP@k = sum over relevant at rank i<k of (relevant so far)/(i+1), / #relevant;
  * Recall@k = relevant in top k / #relevant; P@k = relevant in top k / k;
  * MRR@k = 1/(rank of the first relevant) if within k, else 0;
  * Success@k = 1 if a relevant document is in the top k, else 0 (trec_eval's success_k);
  * Rprec@k = relevant in the top min(k, R) / R, R = #relevant (trec_eval's Rprec of
    the ranking cut at k);
  * bpref@k = trec_eval's bpref of the ranking cut at k (see :func:`_bpref`).
Every measure is "trec_eval's measure of the ranking cut at k": for a ranking no
longer than k, MAP@k, MRR@k, Rprec@k and bpref@k are trec_eval's uncut map,
recip_rank, Rprec and bpref.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from grader.errors import UsageError
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
    """What the qrels say about ``query_ids``, whatever the run."""

    #: relevant (judgement >= level) and judged non-relevant (0 <= judgement < level) documents per query
    n_relevant: np.ndarray
    n_nonrelevant: np.ndarray
    #: (query index, gain) of every positive judgement, gains descending within a query: the ideal ranking
    ideal_query: np.ndarray
    ideal_gain: np.ndarray
    #: 0-based rank of each ideal gain within its query, and its log2(rank + 2) discount
    ideal_position: np.ndarray
    ideal_discount: np.ndarray


@dataclass(frozen=True)
class _LookupKeys:
    """The judgements looked up in the run: sorted ``query index * n_vocab + document code``, and their judgements."""

    keys: np.ndarray
    rels: np.ndarray
    n_vocab: np.int64


def _judgements(qrels: Mapping[str, Mapping[str, int]], query_ids: Sequence[str], relevance_level: int) -> _Judgements:
    """Count of relevant and of judged non-relevant per query, and the ideal gains."""
    n_queries = len(query_ids)
    n_relevant = np.zeros(n_queries, dtype=np.int64)
    n_nonrelevant = np.zeros(n_queries, dtype=np.int64)
    ideal_query: list[int] = []
    ideal_gain: list[int] = []
    for qi, query_id in enumerate(query_ids):
        docs = qrels.get(query_id)
        if not docs:
            continue
        positive = sorted((rel for rel in docs.values() if rel >= 1), reverse=True)
        n_relevant[qi] = sum(1 for rel in positive if rel >= relevance_level)
        # trec_eval counts a judgement < 0 as "in the pool but unjudged", never as non-relevant.
        n_nonrelevant[qi] = sum(1 for rel in docs.values() if 0 <= rel < relevance_level)
        ideal_query.extend([qi] * len(positive))
        ideal_gain.extend(positive)
    ideal_q = np.asarray(ideal_query, dtype=np.int64)
    ideal_pos = np.arange(len(ideal_q), dtype=np.int64) - np.searchsorted(ideal_q, ideal_q, side="left")
    return _Judgements(
        n_relevant,
        n_nonrelevant,
        ideal_q,
        np.asarray(ideal_gain, dtype=np.float64),
        ideal_pos,
        np.log2(ideal_pos.astype(np.float64) + 2.0),
    )


def _lookup_keys(qrels: Mapping[str, Mapping[str, int]], query_ids: Sequence[str], run: Run, least_looked_up: int) -> _LookupKeys:
    """Keys of the judged documents to look up in the run's codes (judgements >= ``least_looked_up``)."""
    vocabulary = _codes_of(run, (doc_id for query_id in query_ids for doc_id in qrels.get(query_id, ())))
    n_vocab = np.int64(max(len(run.doc_vocab), 1))
    judged_keys: list[int] = []
    judged_rels: list[int] = []
    for qi, query_id in enumerate(query_ids):
        for doc_id, rel in qrels.get(query_id, {}).items():
            code = vocabulary.get(doc_id)
            if code is not None and rel >= least_looked_up:
                judged_keys.append(qi * int(n_vocab) + code)
                judged_rels.append(rel)
    keys = np.asarray(judged_keys, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    return _LookupKeys(keys[order], np.asarray(judged_rels, dtype=np.int64)[order], n_vocab)


def _judged_entries(judged: _LookupKeys, rankings: Rankings) -> tuple[np.ndarray, np.ndarray]:
    """The retrieved entries (indexes into ``rankings.doc_codes``, in query and rank order) that have a judgement looked up, and it."""
    offsets, doc_codes = rankings.offsets, rankings.doc_codes
    keys, rels, n_vocab = judged.keys, judged.rels, judged.n_vocab
    if not (len(keys) and len(doc_codes)):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    judged_code = np.zeros(int(n_vocab), dtype=bool)
    judged_code[keys % n_vocab] = True
    candidates = np.flatnonzero(judged_code[doc_codes])
    # Queries of the candidates only: a query index per entry would be as large as the run.
    candidate_keys = segment_of(offsets, candidates) * n_vocab + doc_codes[candidates]
    slot = np.minimum(np.searchsorted(keys, candidate_keys), len(keys) - 1)
    hit = keys[slot] == candidate_keys
    return candidates[hit], rels[slot[hit]]


def least_looked_up(measures: Sequence[Measure]) -> int:
    """The least judgement whose documents must be found in the rankings: 0 with bpref (it needs the judged non-relevant ones), else 1."""
    return 0 if any(measure.family is Family.BPREF for measure in measures) else 1


def _check_level(relevance_level: int) -> None:
    if relevance_level < 1:
        raise UsageError(
            f"relevance level must be at least 1, got {relevance_level}", hint="a level <= 0 would make judged non-relevant documents relevant"
        )


def per_query_measures(
    qrels: Mapping[str, Mapping[str, int]],
    query_ids: Sequence[str],
    rankings: Rankings,
    run: Run,
    measures: Sequence[Measure],
    *,
    relevance_level: int = RELEVANCE_LEVEL,
) -> PerQuery:
    """Compute ``measures`` for each of ``query_ids`` from its ranking in ``rankings``.

    ``relevance_level`` is trec_eval's ``-l``: the least judgement that makes a document
    relevant for every measure but NDCG, whose gains are the judgements themselves
    (trec_eval's ``ndcg`` and ``ndcg_cut`` ignore ``-l`` too). A query without relevant
    judgements scores 0 everywhere (NDCG: without positive judgements).
    """
    _check_level(relevance_level)
    lookup = _lookup_keys(qrels, query_ids, run, least_looked_up(measures))
    judged_entries, judged_entry_rels = _judged_entries(lookup, rankings)
    return measures_of_judged_entries(
        qrels, query_ids, rankings.offsets, judged_entries, judged_entry_rels, measures, relevance_level=relevance_level
    )


def measures_of_judged_entries(
    qrels: Mapping[str, Mapping[str, int]],
    query_ids: Sequence[str],
    offsets: np.ndarray,
    judged_entries: np.ndarray,
    judged_entry_rels: np.ndarray,
    measures: Sequence[Measure],
    *,
    relevance_level: int = RELEVANCE_LEVEL,
) -> PerQuery:
    """``measures`` of each of ``query_ids`` from where its judged documents are ranked.

    The rankings are CSR ``offsets`` (query ``i`` ranks ``offsets[i+1] - offsets[i]``
    documents); ``judged_entries`` are ascending entry indexes ``offsets[i] + rank``
    (0-based rank in trec order) of the retrieved documents judged at least
    :func:`least_looked_up`, ``judged_entry_rels`` their judgements. Nothing else
    of a ranking matters to any measure, so a reader that finds these ranks
    without ordering whole rankings gets the same values, bit for bit.
    """
    _check_level(relevance_level)
    judged = _judgements(qrels, query_ids, relevance_level)
    relevant = _RankedSubset(offsets, judged_entries[judged_entry_rels >= relevance_level])
    # Gains: the judgement of every positively judged entry (the relevant ones when the level is 1).
    gained_mask = judged_entry_rels >= 1
    gained = relevant if relevance_level == 1 else _RankedSubset(offsets, judged_entries[gained_mask])
    gains = judged_entry_rels[gained_mask].astype(np.float64)
    nonrelevant_entries = judged_entries[(judged_entry_rels >= 0) & (judged_entry_rels < relevance_level)]
    values = {
        measure: _measure_values(measure, judged, relevant, gained, gains, nonrelevant_entries, offsets, len(query_ids)) for measure in measures
    }
    return PerQuery(tuple(query_ids), values)


def _measure_values(
    measure: Measure,
    judged: _Judgements,
    relevant: _RankedSubset,
    gained: _RankedSubset,
    gains: np.ndarray,
    nonrelevant_entries: np.ndarray,
    offsets: np.ndarray,
    n_queries: int,
) -> np.ndarray:
    """One measure's value for every query."""
    n_relevant = judged.n_relevant
    relevant_count = n_relevant.astype(np.float64)
    has_relevant = n_relevant > 0
    k = measure.cutoff
    within = relevant.position < k
    q = relevant.query[within]
    if measure.family is Family.P:
        return np.bincount(q, minlength=n_queries).astype(np.float64) / k
    if measure.family is Family.RECALL:
        hits = np.bincount(q, minlength=n_queries).astype(np.float64)
        return np.divide(hits, relevant_count, out=np.zeros(n_queries), where=has_relevant)
    if measure.family is Family.MAP:
        precision_sum = np.bincount(q, weights=relevant.so_far[within] / (relevant.position[within] + 1.0), minlength=n_queries)
        return np.divide(precision_sum, relevant_count, out=np.zeros(n_queries), where=has_relevant)
    if measure.family is Family.NDCG:
        ideal_q, ideal_g, ideal_pos, ideal_discount = judged.ideal_query, judged.ideal_gain, judged.ideal_position, judged.ideal_discount
        gained_within = gained.position < k
        dcg = np.bincount(gained.query[gained_within], weights=gains[gained_within] / gained.discount[gained_within], minlength=n_queries)
        ideal_within = ideal_pos < k
        idcg = np.bincount(ideal_q[ideal_within], weights=ideal_g[ideal_within] / ideal_discount[ideal_within], minlength=n_queries)
        return np.divide(dcg, idcg, out=np.zeros(n_queries), where=idcg > 0)
    if measure.family is Family.MRR:
        firsts = (relevant.so_far == 1.0) & within
        reciprocal = np.zeros(n_queries)
        reciprocal[relevant.query[firsts]] = 1.0 / (relevant.position[firsts] + 1.0)
        return reciprocal
    if measure.family is Family.SUCCESS:
        return (np.bincount(q, minlength=n_queries) > 0).astype(np.float64)
    if measure.family is Family.RPREC:
        # trec_eval's Rprec of the ranking cut at k: relevant in the top min(k, R), over R.
        in_top_r = relevant.position < np.minimum(k, n_relevant[relevant.query])
        hits = np.bincount(relevant.query[in_top_r], minlength=n_queries).astype(np.float64)
        return np.divide(hits, relevant_count, out=np.zeros(n_queries), where=has_relevant)
    if measure.family is Family.BPREF:
        return _bpref(relevant, within, nonrelevant_entries, offsets, n_relevant, judged.n_nonrelevant)
    raise AssertionError(measure.family)  # pragma: no cover - exhaustive over Family


class _RankedSubset:
    """Some entries of the rankings (ascending entry indices): their query, 0-based rank, count so far, discount."""

    def __init__(self, offsets: np.ndarray, entries: np.ndarray) -> None:
        self.entries = entries
        self.query = segment_of(offsets, entries)
        self.position = entries - offsets[self.query]  # 0-based rank
        # 1-based count of subset entries up to and including this one, per query.
        first_of_query = np.searchsorted(self.query, self.query, side="left")
        self.so_far = (np.arange(len(self.query)) - first_of_query + 1).astype(np.float64)
        self.discount = np.log2(self.position.astype(np.float64) + 2.0)


def _bpref(
    relevant: _RankedSubset,
    within: np.ndarray,
    nonrelevant_entries: np.ndarray,
    offsets: np.ndarray,
    n_relevant: np.ndarray,
    n_nonrelevant: np.ndarray,
) -> np.ndarray:
    """trec_eval's bpref (m_bpref.c) of the rankings cut where ``within`` says, per query.

    Each relevant retrieved document adds 1 - min(n, R) / min(N, R), n being the judged
    non-relevant documents ranked above it (1 when n = 0), N the judged non-relevant
    documents of the query and R its relevant ones; the sum, in rank order, is divided
    by R. Unjudged documents and judgements < 0 are skipped.
    """
    entries, query = relevant.entries[within], relevant.query[within]
    above = np.searchsorted(nonrelevant_entries, entries) - np.searchsorted(nonrelevant_entries, offsets[query])
    r = n_relevant[query]
    denominator = np.minimum(n_nonrelevant[query], r).astype(np.float64)
    numerator = np.minimum(above, r).astype(np.float64)
    preferred = above > 0  # else the term is 1 (and N may be 0)
    term = np.where(preferred, 1.0 - np.divide(numerator, denominator, out=np.zeros(len(entries)), where=preferred), 1.0)
    total = np.bincount(query, weights=term, minlength=len(n_relevant))
    return np.divide(total, n_relevant.astype(np.float64), out=np.zeros(len(n_relevant)), where=n_relevant > 0)
