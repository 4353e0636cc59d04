"""The compact binary run (grader/runs/compact.py): round trips, exact scoring, and every refusal.

Expected values are derived independently: the rankings of the original run (its own
trec order), its evaluation before encoding, ``sorted`` by UTF-8 bytes for the canonical order.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from grader.errors import InternalError, TaskFailure
from grader.failures import FailureCode
from grader.metrics.measures import parse_measure
from grader.metrics.policy import Policy, evaluate
from grader.runs.compact import HEADER_BYTES, canonical_order, compact_size, decode_run, encode_run, run_digest
from grader.runs.run import Run

DEPTH = 10


def _world(seed: int = 7, *, docs: int = 40, queries: int = 12) -> tuple[Run, tuple[str, ...], tuple[str, ...], dict[str, dict[str, int]]]:
    rng = random.Random(seed)
    doc_ids = [f"d{i}" for i in range(docs)] + ["Zé", "zz", "é-doc", "a b"[0:1] + "x"]
    query_ids = [f"q{i}" for i in range(queries)]
    rankings: dict[str, dict[str, float]] = {}
    for q in query_ids[:-2]:  # two staged queries the run does not answer
        chosen = rng.sample(doc_ids, rng.randint(0, DEPTH))
        # ties on purpose: trec order breaks them by document id
        rankings[q] = {d: float(rng.randint(0, 3)) for d in chosen}
    qrels = {q: {d: rng.randint(0, 2) for d in rng.sample(doc_ids, 4)} for q in query_ids}
    return Run.from_mapping(rankings), canonical_order(doc_ids), canonical_order(query_ids), qrels


def _rankings(run: Run) -> dict[str, list[str]]:
    return {q: [d for d, _ in run.ranking(q)] for q in run.query_ids}


def test_canonical_order_is_utf8_byte_order() -> None:
    ids = ["b", "Z", "é", "a", "ä", "\U0001f600", "ｚ", "A1", "A"]
    assert canonical_order(ids) == tuple(sorted(ids, key=lambda s: s.encode("utf-8")))


def test_round_trip_keeps_trec_order_and_scores() -> None:
    run, corpus, queries, _ = _world()
    plain = encode_run(run, corpus=corpus, queries=queries, depth=DEPTH)
    rebuilt = decode_run(plain, documents=len(corpus), queries=len(queries), depth=DEPTH).to_run(corpus, queries)
    assert _rankings(rebuilt) == _rankings(run)
    scored = encode_run(run, corpus=corpus, queries=queries, depth=DEPTH, scores=True)
    again = decode_run(scored, documents=len(corpus), queries=len(queries), depth=DEPTH).to_run(corpus, queries)
    assert {q: again.ranking(q) for q in run.query_ids} == {q: run.ranking(q) for q in run.query_ids}
    assert len(plain) == HEADER_BYTES + 8 * len(run.query_ids) + 4 * run.n_entries
    assert len(scored) == len(plain) + 8 * run.n_entries
    assert run_digest(plain) != run_digest(scored) and len(run_digest(plain)) == 64


@pytest.mark.parametrize("policy", [Policy.STRICT, Policy.COIR])
def test_scoring_the_decoded_run_is_bit_identical(policy: Policy) -> None:
    """strict reads only the order (no scores sent); coir re-ranks on float32 scores (sent)."""
    measures = [parse_measure(m) for m in ("NDCG@10", "MAP@10", "P@5", "Recall@10", "MRR@10")]
    for seed in range(5):
        run, corpus, queries, qrels = _world(seed)
        data = encode_run(run, corpus=corpus, queries=queries, depth=DEPTH, scores=policy is Policy.COIR)
        rebuilt = decode_run(data, documents=len(corpus), queries=len(queries), depth=DEPTH).to_run(corpus, queries)
        direct, served = evaluate(qrels, run, measures, policy), evaluate(qrels, rebuilt, measures, policy)
        assert served.means() == direct.means()
        assert served.per_query.query_ids == direct.per_query.query_ids
        for measure in measures:
            assert served.per_query.values[measure].tobytes() == direct.per_query.values[measure].tobytes()


def test_sizes_of_the_issue() -> None:
    """4 KB a query at depth 1000 as u32 indexes, 12 KB with float64 scores: small enough to post a run per task."""
    assert compact_size(1, 1000) - HEADER_BYTES == 4008
    assert compact_size(1, 1000, scores=True) - HEADER_BYTES == 12008
    assert round(compact_size(52_561, 1000) / 1e6) == 211  # CodeSearchNet: ~200 MB
    assert round(compact_size(31_306, 1000) / 1e6) == 125  # CodeFeedback-ST


def _header(**fields: int) -> bytes:
    values = {"magic": 0, "version": 1, "flags": 0, "r1": 0, "docs": 5, "queries": 1, "depth": 3, "r2": 0, "hits": 2} | fields
    return struct.pack("<4sBBHIIIIQ", b"GRUN", *list(values.values())[1:])


def _body(queries: list[int], lengths: list[int], docs: list[int], scores: list[float] | None = None) -> bytes:
    out = np.asarray(queries, "<u4").tobytes() + np.asarray(lengths, "<u4").tobytes() + np.asarray(docs, "<u4").tobytes()
    return out + (np.asarray(scores, "<f8").tobytes() if scores is not None else b"")


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (_header() + _body([0], [2], [1, 5]), "outside the corpus"),
        (_header() + _body([0], [2], [4, 4]), "appears twice"),
        (_header(hits=7) + _body([0], [7], [0, 1, 2, 3, 4, 0, 1]), "hits for 1 queries at depth 3"),  # beyond depth + slack
        (_header(queries=2, hits=7) + _body([0, 1], [7, 0], [0, 1, 2, 3, 4, 0, 1]), "more than the depth"),
        (_header(hits=4) + _body([0], [4], [0, 1, 2, 3]), "beyond the depth 3"),  # no scores: no boundary tie group
        (_header(flags=1, hits=4) + _body([0], [4], [4, 3, 2, 1], [3.0, 2.0, 1.0, 0.0]), "beyond the depth 3"),  # not tied
        (_header() + _body([2], [2], [0, 1]), "outside the staged queries"),
        (_header(queries=2, hits=2) + _body([1, 0], [1, 1], [0, 1]), "canonical order"),
        (_header(queries=3) + _body([0, 1, 2], [1, 1, 0], [0, 1]), "3 queries; 2 were staged"),
        (_header(docs=6) + _body([0], [2], [0, 1]), "pinned corpus has 5"),
        (_header(depth=4) + _body([0], [2], [0, 1]), "the job's depth is 3"),
        (_header(hits=1) + _body([0], [2], [0]), "add up to 2"),
        (_header() + _body([0], [2], [0, 1]) + b"\0", "oversized"),
        (_header() + _body([0], [2], [0, 1])[:-1], "truncated"),
        (b"GRUX" + _header()[4:] + _body([0], [2], [0, 1]), "not a compact run"),
        (_header(flags=2) + _body([0], [2], [0, 1]), "unknown flags"),
        (_header(flags=1) + _body([0], [2], [0, 1], [1.0, float("nan")]), "finite"),
        (_header(flags=1) + _body([0], [2], [0, 1], [1.0, 2.0]), "trec order"),
        (_header(flags=1) + _body([0], [2], [0, 1], [1.0, 1.0]), "trec order"),  # a tie: document index descending
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_refusals_name_what_is_wrong(data: bytes, words: str) -> None:
    with pytest.raises(TaskFailure) as caught:
        decode_run(data, documents=5, queries=2, depth=3)
    assert caught.value.code is FailureCode.INFRA
    assert words in str(caught.value)


def test_a_valid_hand_made_run_decodes() -> None:
    decoded = decode_run(_header(flags=1) + _body([1], [2], [1, 0], [1.0, 1.0]), documents=5, queries=2, depth=3)
    assert decoded.queries.tolist() == [1] and decoded.docs.tolist() == [1, 0] and decoded.offsets.tolist() == [0, 2]


def test_the_caller_chooses_the_fault() -> None:
    with pytest.raises(TaskFailure) as caught:
        decode_run(b"", documents=5, queries=2, depth=3, fault=FailureCode.OUTPUT_INVALID)
    assert caught.value.code is FailureCode.OUTPUT_INVALID


def test_fuzz_truncated_and_flipped_bytes_are_refused_cleanly() -> None:
    """Every prefix of a valid run is refused as a TaskFailure; a flipped byte decodes or is refused, never crashes."""
    run, corpus, queries, _ = _world(3)
    for scores in (False, True):
        data = encode_run(run, corpus=corpus, queries=queries, depth=DEPTH, scores=scores)
        for cut in range(len(data)):
            with pytest.raises(TaskFailure):
                decode_run(data[:cut], documents=len(corpus), queries=len(queries), depth=DEPTH)
        rng = random.Random(11)
        for _ in range(300):
            mutated = bytearray(data)
            mutated[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            try:
                decoded = decode_run(bytes(mutated), documents=len(corpus), queries=len(queries), depth=DEPTH)
            except TaskFailure:
                continue
            decoded.to_run(corpus, queries)  # what decodes builds a valid run


def test_encode_refuses_what_collect_should_have_caught() -> None:
    run, corpus, queries, _ = _world()
    with pytest.raises(InternalError, match="not in the staged data"):
        encode_run(run, corpus=tuple(d for d in corpus if d != run.doc_vocab[0]), queries=queries, depth=DEPTH)
    with pytest.raises(InternalError, match="more than the depth"):
        encode_run(run, corpus=corpus, queries=queries, depth=2)
