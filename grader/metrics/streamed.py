"""Score a TREC run file a block of queries at a time, never holding the run.

:func:`evaluate_trec_file` gives the :class:`~grader.metrics.policy.Evaluation`
that ``evaluate(qrels, read_run(path), ...)`` gives, bit for bit, in a fraction
of its time and memory: the scanner (:mod:`grader.runs.trec_scan`) splits each
block's lines, :func:`grader.metrics.judged_ranks.rank_block` reduces each query
to its length and the ranks of its judged documents, and the measures are
computed from those alone (:func:`grader.metrics.per_query.measures_of_judged_entries`,
the same code the in-memory path ends in).

It returns ``None`` for any file it cannot take exactly: a line to refuse, a
document twice in a query, a query whose lines are not together, ids a table
cannot hold. The caller then reads the run whole (:func:`grader.runs.readers.read_run`),
which accepts it as it always has, or refuses it in one line naming its file,
line and field.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from grader.metrics.measures import Measure
from grader.metrics.per_query import RELEVANCE_LEVEL, least_looked_up, measures_of_judged_entries
from grader.metrics.policy import Evaluation, QueryCounts, evaluate
from grader.metrics.policy_name import Policy
from grader.runs.readers import RunFormat, detect_format, read_run

if TYPE_CHECKING:
    from grader.metrics.judged_ranks import Judged
    from grader.runs.trec_scan import RawBlock


def score_run_file(
    qrels: Mapping[str, Mapping[str, int]],
    path: Path,
    fmt: RunFormat | None,
    measures: Sequence[Measure],
    policy: Policy = Policy.STRICT,
    *,
    relevance_level: int = RELEVANCE_LEVEL,
) -> Evaluation:
    """Score the run file at ``path``: a TREC run by blocks (:func:`evaluate_trec_file`), else, or when that cannot take it, read whole."""
    if path.is_file() and (fmt or detect_format(path)) is RunFormat.TREC:
        evaluation = evaluate_trec_file(qrels, path, measures, policy, relevance_level=relevance_level)
        if evaluation is not None:
            return evaluation
    return evaluate(qrels, read_run(path, fmt), measures, policy, relevance_level=relevance_level)


#: Blocks scanned at once (each in a thread: the compiled kernels release the GIL).
WORKERS = max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class _Ranked:
    """One block reduced: each run of lines' query id, judged query (-1: none) and ranked length; each judged hit's run, rank and judgement."""

    query_ids: list[str]
    run_judged: np.ndarray
    run_length: np.ndarray
    hit_run: np.ndarray
    hit_rank: np.ndarray
    hit_rel: np.ndarray


def _rank(raw: RawBlock, tables: Judged, coir: bool) -> _Ranked:
    """Scan one block and rank its judged documents; raise :class:`NotScannable` for anything to read whole."""
    from grader.metrics.judged_ranks import OK, rank_block
    from grader.runs.trec_scan import NotScannable

    block = raw.scan()
    count = block.count
    run_first = np.empty(count + 1, dtype=np.int64)
    run_judged = np.empty(count, dtype=np.int64)
    run_length = np.empty(count, dtype=np.int64)
    hit_run = np.empty(count, dtype=np.int64)
    hit_rank = np.empty(count, dtype=np.int64)
    hit_rel = np.empty(count, dtype=np.int64)
    n_runs, n_hits, status = rank_block(
        block.data,
        count,
        block.query_start,
        block.query_length,
        block.doc_start,
        block.doc_length,
        block.doc_hash,
        block.scores,
        tables.query_bytes,
        tables.query_offsets,
        tables.query_slots,
        tables.pair_query,
        tables.pair_first,
        tables.pair_bytes,
        tables.pair_offsets,
        tables.pair_hash,
        tables.pair_rel,
        tables.pair_slots,
        coir,
        coir,
        run_first,
        run_judged,
        run_length,
        hit_run,
        hit_rank,
        hit_rel,
    )
    if status != OK:
        raise NotScannable
    starts = block.query_start[run_first[:n_runs]]
    ends = starts + block.query_length[run_first[:n_runs]]
    text = block.data
    query_ids = [text[start:end].tobytes().decode("utf-8") for start, end in zip(starts.tolist(), ends.tolist(), strict=True)]
    # Copies: a view would keep each block's line-sized arrays alive to the end.
    return _Ranked(
        query_ids, run_judged[:n_runs].copy(), run_length[:n_runs].copy(), hit_run[:n_hits].copy(), hit_rank[:n_hits].copy(), hit_rel[:n_hits].copy()
    )


def evaluate_trec_file(
    qrels: Mapping[str, Mapping[str, int]],
    path: Path,
    measures: Sequence[Measure],
    policy: Policy = Policy.STRICT,
    *,
    relevance_level: int = RELEVANCE_LEVEL,
    block_bytes: int | None = None,
) -> Evaluation | None:
    """Score the TREC run at ``path`` as :func:`grader.metrics.policy.evaluate` would; ``None`` when it must be read whole."""
    # Here, not at the top: importing numba takes a good part of a second, which no other run format needs.
    from grader.metrics.judged_ranks import UnencodableId, judged_tables
    from grader.runs.trec_scan import NotScannable, iter_raw_blocks

    judged = [q for q, docs in qrels.items() if docs]
    if not judged:
        return None  # the whole-run path reads (and may refuse) the run before it refuses the judgements
    try:
        tables = judged_tables(qrels, judged, least_looked_up(measures))
    except UnencodableId:
        return None
    coir = policy is Policy.COIR
    run_queries: set[str] = set()
    lengths = np.zeros(len(judged), dtype=np.int64)
    present = np.zeros(len(judged), dtype=bool)
    extra = 0
    hit_queries: list[np.ndarray] = []
    hit_ranks: list[np.ndarray] = []
    hit_rels: list[np.ndarray] = []

    def absorb(ranked: _Ranked) -> bool:
        """Add one block's queries (in file order); False when a query's lines are not together."""
        nonlocal extra
        for query_id in ranked.query_ids:
            if query_id in run_queries:
                return False
            run_queries.add(query_id)
        found = ranked.run_judged >= 0
        extra += int(np.count_nonzero(~found))
        lengths[ranked.run_judged[found]] = ranked.run_length[found]
        present[ranked.run_judged[found]] = True
        hit_queries.append(ranked.run_judged[ranked.hit_run])
        hit_ranks.append(ranked.hit_rank)
        hit_rels.append(ranked.hit_rel)
        return True

    try:
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            pending: deque[Future[_Ranked]] = deque()
            # WORKERS + 1 buffers: WORKERS - 1 blocks in flight while the next is read.
            for raw in iter_raw_blocks(path, block_bytes=block_bytes, buffers=WORKERS + 1):
                pending.append(pool.submit(_rank, raw, tables, coir))
                while len(pending) >= WORKERS or (pending and pending[0].done()):
                    if not absorb(pending.popleft().result()):
                        return None
            while pending:
                if not absorb(pending.popleft().result()):
                    return None
    except NotScannable:
        return None
    if not run_queries:
        return None  # an empty run: the line reader refuses it
    return _evaluation(qrels, judged, measures, policy, relevance_level, lengths, present, extra, hit_queries, hit_ranks, hit_rels)


def _evaluation(
    qrels: Mapping[str, Mapping[str, int]],
    judged: list[str],
    measures: Sequence[Measure],
    policy: Policy,
    relevance_level: int,
    lengths: np.ndarray,
    present: np.ndarray,
    extra: int,
    hit_queries: list[np.ndarray],
    hit_ranks: list[np.ndarray],
    hit_rels: list[np.ndarray],
) -> Evaluation:
    """The evaluation of the judged queries from their ranked lengths and judged ranks, as :func:`~grader.metrics.policy.evaluate` builds it."""
    # strict: every judged query (absent ones rank nothing); coir: the judged queries the run has.
    evaluated = np.arange(len(judged)) if policy is Policy.STRICT else np.flatnonzero(present)
    position = np.full(len(judged), -1, dtype=np.int64)
    position[evaluated] = np.arange(len(evaluated))
    offsets = np.zeros(len(evaluated) + 1, dtype=np.int64)
    np.cumsum(lengths[evaluated], out=offsets[1:])
    queries = np.concatenate(hit_queries) if hit_queries else np.empty(0, dtype=np.int64)
    entries = offsets[position[queries]] + (np.concatenate(hit_ranks) if hit_ranks else np.empty(0, dtype=np.int64))
    rels = np.concatenate(hit_rels) if hit_rels else np.empty(0, dtype=np.int64)
    order = np.argsort(entries, kind="stable")
    query_ids = [judged[i] for i in evaluated.tolist()]
    per_query = measures_of_judged_entries(qrels, query_ids, offsets, entries[order], rels[order], measures, relevance_level=relevance_level)
    # Every query of a TREC run ranks at least one document: present is answered.
    answered = int(np.count_nonzero(present))
    counts = QueryCounts(judged=len(judged), answered=answered, missing=len(judged) - answered, extra=extra, evaluated=len(query_ids))
    return Evaluation(policy, tuple(measures), per_query, counts, relevance_level)
