"""A served grade does not depend on the blinding key: the boundary tie group (grader/runs/ties.py).

A worker searches its pseudonymous copy, keeps each query's top ``depth`` hits plus the
hits tied with the depth-th, and the server renames, re-sorts and cuts at the depth
(:func:`grader.grading.scoring.real_run`). The expected ranking is derived here
independently: every document's score by hand, sorted as trec_eval orders ties
(score descending, then document id descending), cut at the depth.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from grader.data.registry import resolve_benchmark
from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.grading.scoring import real_run
from grader.retrieval.search import search_run
from grader.runs.compact import HEADER_BYTES, decode_run, encode_run
from grader.runs.run import Run
from grader.runs.ties import cut_at_depth, keep_boundary_ties, tie_slack
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindingKey, blind

DEPTH = 5
#: Per query kind: how many documents score 1.0 and how many tie at 0.5 (the rest score 0.25).
#: Two above the cut, so 3 of each tie group make the depth; 6 and 7 tied fit the slack
#: (8 would fill it exactly, and a full slack ending in a tie is counted: more may have tied), 30 do not.
GROUPS = ((2, 6), (2, 7), (2, 30))


@pytest.fixture(scope="module")
def world() -> tuple[object, list[str], list[str], np.ndarray, np.ndarray, dict[str, dict[str, float]]]:
    """The mini benchmark's text2code task, vectors whose dot products are exact, and every score by hand."""
    task = resolve_benchmark("mini").task("text2code")
    corpus = [document.id for document in task.iter_corpus()]
    judged = [query.id for query in task.iter_queries() if query.id in task.qrels("dev")]
    rng = np.random.default_rng(22)
    corpus_vectors = np.full((len(corpus), len(GROUPS)), 0.25, dtype=np.float32)
    for kind, (top, tied) in enumerate(GROUPS):
        chosen = rng.choice(len(corpus), size=top + tied, replace=False)
        corpus_vectors[chosen[:top], kind] = 1.0
        corpus_vectors[chosen[top:], kind] = 0.5
    query_vectors = np.eye(len(GROUPS), dtype=np.float32)[np.arange(len(judged)) % len(GROUPS)]
    scores = {q: {d: float(corpus_vectors[j, i % len(GROUPS)]) for j, d in enumerate(corpus)} for i, q in enumerate(judged)}
    return task, corpus, judged, query_vectors, corpus_vectors, scores


def _served(world: tuple, key: BlindingKey, overflow: dict[str, int] | None = None) -> Run:
    """What a worker holding ``key``'s pseudonymous copy sends, as the server scores it."""
    task, corpus, judged, query_vectors, corpus_vectors, _ = world
    documents, queries = blind(key, task.name, DOCUMENT, corpus), blind(key, task.name, QUERY, judged)
    pseudo_docs = [documents.staged[row] for row in documents.rows.tolist()]
    pseudo_queries = [queries.staged[row] for row in queries.rows.tolist()]
    searched = search_run(pseudo_queries, pseudo_docs, query_vectors, corpus_vectors, DEPTH + tie_slack(DEPTH))
    kept = keep_boundary_ties(searched, DEPTH)
    data = encode_run(kept, corpus=documents.staged, queries=queries.staged, depth=DEPTH, scores=True)
    return real_run(task, data, judged, depth=DEPTH, key=key, overflow=overflow)


def _expected(scores: dict[str, dict[str, float]]) -> dict[str, list[str]]:
    return {q: sorted(by_doc, key=lambda d: (by_doc[d], d.encode()), reverse=True)[:DEPTH] for q, by_doc in scores.items()}


def _rankings(run: Run, queries: list[str] | None = None) -> dict[str, list[str]]:
    return {q: [d for d, _ in run.ranking(q)] for q in (queries if queries is not None else run.query_ids)}


def _keys() -> tuple[BlindingKey, BlindingKey]:
    return BlindingKey(hashlib.sha256(b"ties one").digest()), BlindingKey(hashlib.sha256(b"ties two").digest())


def test_two_keys_cut_alike_and_as_a_direct_search(world: tuple) -> None:
    _, corpus, judged, query_vectors, corpus_vectors, scores = world
    within = [q for i, q in enumerate(judged) if i % len(GROUPS) != 2]  # tie groups that fit the slack
    first, second = _keys()
    one, two = _served(world, first), _served(world, second)
    direct = search_run(judged, corpus, query_vectors, corpus_vectors, DEPTH)
    expected = {q: ranking for q, ranking in _expected(scores).items() if q in within}
    assert _rankings(one, within) == expected
    assert _rankings(two, within) == expected
    assert _rankings(direct, within) == expected
    # the scores too: the run a served report scores is the direct one, bit for bit
    assert {q: one.ranking(q) for q in within} == {q: direct.ranking(q) for q in within}


def test_a_tie_group_wider_than_the_slack_is_counted(world: tuple) -> None:
    task, _, judged, _, _, _ = world
    overflow: dict[str, int] = {}
    run = _served(world, _keys()[0], overflow)
    assert overflow == {task.name: len(judged[2 :: len(GROUPS)])}
    assert all(len(run.ranking(q)) == DEPTH for q in judged)  # still cut at the depth


def test_the_slack_keeps_only_the_tie_group() -> None:
    run = Run.from_mapping({"q": {"a": 3.0, "b": 2.0, "c": 2.0, "d": 2.0, "e": 1.0}, "r": {"a": 1.0}})
    assert _rankings(keep_boundary_ties(run, 2)) == {"q": ["a", "d", "c", "b"], "r": ["a"]}
    assert _rankings(cut_at_depth(keep_boundary_ties(run, 2), 2)) == {"q": ["a", "d"], "r": ["a"]}


def _run_bytes(extra_score: float, *, scores: bool = True) -> bytes:
    """A compact run over 6 documents, one query at depth 2 with a third hit scoring ``extra_score`` (the 2nd scores 2.0)."""
    docs, hit_scores = [5, 4, 3], [3.0, 2.0, extra_score]
    header = struct.pack("<4sBBHIIIIQ", b"GRUN", 1, 1 if scores else 0, 0, 6, 1, 2, 0, len(docs))
    body = struct.pack("<II", 0, len(docs)) + struct.pack(f"<{len(docs)}I", *docs)
    data = header + body + (struct.pack(f"<{len(docs)}d", *hit_scores) if scores else b"")
    assert len(data) == HEADER_BYTES + 8 + 4 * len(docs) + (8 * len(docs) if scores else 0)
    return data


def test_hits_beyond_the_depth_must_tie_with_the_depth_th() -> None:
    decoded = decode_run(_run_bytes(2.0), documents=6, queries=1, depth=2)  # a tie group: accepted
    assert decoded.offsets.tolist() == [0, 3]
    for data in (_run_bytes(1.0), _run_bytes(2.0, scores=False)):  # lower than the 2nd; no scores to show a tie
        with pytest.raises(TaskFailure) as refused:
            decode_run(data, documents=6, queries=1, depth=2)
        assert refused.value.code is FailureCode.INFRA
        assert "beyond the depth 2" in str(refused.value)
