"""The run digest a report carries per task (docs/reports.md, "The run digest").

Expected digests are computed here from the documented text (hashlib over hand-written lines), not by the
module; a run given in another order, read from a shuffled file, or scored by the server from a worker's
pseudonymous compact run must give the same digest, and a change of ranking must change it.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from grader.data.benchmark import load_benchmark_folder
from grader.grading.scoring import real_run, report_from_runs
from grader.metrics.measures import parse_measures
from grader.metrics.policy import Policy
from grader.runs.compact import canonical_order, encode_run, has_ties
from grader.runs.digest import run_digest
from grader.runs.readers import read_run
from grader.runs.run import Run
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindingKey, blind
from tests.conftest import write_task

RANKINGS = {
    "q2": {"d1": 0.5, "d3": 0.9, "ü": 0.5},  # a tie: the larger id first (trec order)
    "q10": {"d2": 0.1},
    "q1": {},
}
#: The documented text of RANKINGS, written out by hand: queries in byte order ("q1" < "q10" < "q2").
TEXT = "q1\nq10\td2\nq2\td3\tü\td1\n"


def expected() -> str:
    return hashlib.sha256(TEXT.encode("utf-8")).hexdigest()


def test_the_digest_is_the_sha256_of_the_documented_text() -> None:
    assert run_digest(Run.from_mapping(RANKINGS)) == expected()


def test_orders_and_files_give_the_same_digest(tmp_path: Path) -> None:
    shuffled = {q: dict(reversed(list(ranking.items()))) for q, ranking in reversed(list(RANKINGS.items()))}
    assert run_digest(Run.from_mapping(shuffled)) == expected()
    lines = [f"{q} Q0 {d} 0 {s} tag" for q, ranking in RANKINGS.items() for d, s in ranking.items()]
    random.Random(7).shuffle(lines)
    (tmp_path / "run.trec").write_text("\n".join(lines) + "\n", encoding="utf-8")
    from_file = read_run(tmp_path / "run.trec")
    # A TREC file cannot hold a query with an empty ranking: the digest has no "q1" line then.
    assert run_digest(from_file) == hashlib.sha256("q10\td2\nq2\td3\tü\td1\n".encode()).hexdigest()


def test_a_changed_ranking_changes_the_digest_and_a_score_that_keeps_it_does_not() -> None:
    swapped = {**RANKINGS, "q2": {"d1": 0.95, "d3": 0.9, "ü": 0.5}}
    assert run_digest(Run.from_mapping(swapped)) != expected()
    assert run_digest(Run.from_mapping(swapped)) == hashlib.sha256("q1\nq10\td2\nq2\td1\td3\tü\n".encode()).hexdigest()
    rescaled = {q: {d: s / 2 for d, s in ranking.items()} for q, ranking in RANKINGS.items()}
    assert run_digest(Run.from_mapping(rescaled)) == expected()


def test_the_server_computes_it_under_the_real_ids_from_a_pseudonymous_compact_run(tmp_path: Path) -> None:
    corpus = [{"_id": f"doc{n}", "title": "", "text": f"text {n}"} for n in range(12)]
    queries = [{"_id": f"query{n}", "text": f"q {n}"} for n in range(4)]
    qrels = {"test": [(f"query{n}", f"doc{n}", 1) for n in range(4)]}
    write_task(tmp_path / "bench" / "t", corpus=corpus, queries=queries, qrels=qrels)
    (tmp_path / "bench" / "benchmark.json").write_text(
        '{"name": "b", "version": "1", "primary_measure": "NDCG@10", "tasks": ["t"]}', encoding="utf-8"
    )
    task = load_benchmark_folder(tmp_path / "bench").task("t")
    rng = random.Random(3)
    # Ties included (scores rounded to one decimal): the server re-sorts them under the real ids.
    rankings = {q["_id"]: {d["_id"]: round(rng.random(), 1) for d in rng.sample(corpus, 6)} for q in queries}
    direct = Run.from_mapping(rankings)
    key = BlindingKey(hashlib.sha256(b"run digest test").digest())
    documents = blind(key, "t", DOCUMENT, [d["_id"] for d in corpus])
    judged = blind(key, "t", QUERY, [q["_id"] for q in queries])
    to_pseudonym = {real: staged for staged, real in documents.real_of.items()}
    query_pseudonym = {real: staged for staged, real in judged.real_of.items()}
    blinded = Run.from_mapping({query_pseudonym[q]: {to_pseudonym[d]: s for d, s in r.items()} for q, r in rankings.items()})
    data = encode_run(blinded, corpus=documents.staged, queries=judged.staged, depth=10, scores=has_ties(blinded))
    served = real_run(task, data, [q["_id"] for q in queries], depth=10, key=key)
    assert run_digest(served) == run_digest(direct)
    # The report the server builds from the worker's facts and compact run carries that digest.
    moment = "2026-01-01T00:00:00Z"
    facts = {"subject": {"kind": "onnx", "name": "m", "digest": {"sha256": "0" * 64}}, "sandbox": None, "labels": {}}
    facts |= {"started_at": moment, "finished_at": moment, "tasks": {"t": {"failure": None}}}
    benchmark = load_benchmark_folder(tmp_path / "bench")
    report = report_from_runs(
        benchmark,
        split="test",
        tasks=["t"],
        facts=facts,
        runs={"t": data},
        measures=parse_measures(["NDCG@10"]),
        policy=Policy.STRICT,
        top_k=10,
        key=key,
    )
    assert report["tasks"]["t"]["run_digest"] == {"scheme": "grader-run/v1", "sha256": run_digest(direct)}
    # Without blinding (the real ids' canonical order), and without scores where no tie needs them: the same digest.
    plain = encode_run(direct, corpus=canonical_order([d["_id"] for d in corpus]), queries=canonical_order(list(rankings)), depth=10, scores=True)
    assert run_digest(real_run(task, plain, [q["_id"] for q in queries], depth=10, key=None)) == run_digest(direct)
