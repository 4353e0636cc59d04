"""The server's scoring of a worker's compact run, at the size of the largest CoIR task.

Measures, in a fresh child under the scoring process's address-space bound
(``grader.grading.score_process.ADDRESS_SPACE_BYTES``): the compact run's size,
encoding it (the worker's side), decoding and validating it, rebuilding the run,
and scoring it (strict policy, NDCG@10 and the CoIR measures), with the child's peak RSS.

    .venv/bin/python bench/compact_runs.py                   # CodeFeedback-ST: 31,306 queries x 1,000 hits
    .venv/bin/python bench/compact_runs.py --queries 2000    # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np


def child(queries: int, corpus: int, depth: int) -> dict[str, float]:
    from grader.grading.score_process import ADDRESS_SPACE_BYTES  # the scoring processes' bound
    from grader.metrics.measures import parse_measure
    from grader.metrics.policy import Policy, evaluate
    from grader.runs.compact import canonical_order, decode_run, encode_run
    from grader.runs.run import Run

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    rng = np.random.default_rng(7)
    doc_ids = canonical_order([f"doc{i}" for i in range(corpus)])
    query_ids = canonical_order([f"q{i}" for i in range(queries)])
    # each query's hits: distinct documents (a stride through a prime-sized corpus), scores falling
    starts = rng.integers(0, corpus, queries)
    steps = rng.integers(1, corpus, queries)
    codes = ((starts[:, None] + steps[:, None] * np.arange(depth)[None, :]) % corpus).ravel()
    scores = np.tile(np.arange(depth, 0, -1, dtype=np.float64), queries)
    offsets = np.arange(queries + 1, dtype=np.int64) * depth
    run = Run.build(query_ids, offsets, codes, doc_ids, scores, doc_ranks=np.arange(corpus), doc_ids_checked=True, in_place=True)
    qrels = {q: {doc_ids[int(codes[i * depth + int(rng.integers(0, depth))])]: 1} for i, q in enumerate(query_ids)}
    measures = [parse_measure(m) for m in ("NDCG@10", "MAP@1000", "Recall@1000", "MRR@1000", "P@10")]
    out: dict[str, float] = {}
    t = time.perf_counter()
    data = encode_run(run, corpus=doc_ids, queries=query_ids, depth=depth)
    out["encode_s"] = time.perf_counter() - t
    out["bytes"] = len(data)
    del run
    t = time.perf_counter()
    decoded = decode_run(data, documents=corpus, queries=queries, depth=depth)
    out["decode_validate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    rebuilt = decoded.to_run(doc_ids, query_ids)
    out["rebuild_s"] = time.perf_counter() - t
    t = time.perf_counter()
    evaluate(qrels, rebuilt, measures, Policy.STRICT)
    out["score_s"] = time.perf_counter() - t
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=31_306)
    parser.add_argument("--corpus", type=int, default=999_983)
    parser.add_argument("--depth", type=int, default=1000)
    args = parser.parse_args()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        result = child(args.queries, args.corpus, args.depth)
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _pid, status, _usage = os.wait4(pid, 0)
    if status != 0 or not text:
        sys.exit(f"the child failed (status {status})")
    result = json.loads(text)
    print(f"{args.queries} queries x {args.depth} hits over {args.corpus} documents")
    for key, value in result.items():
        print(f"  {key:>18}: {value:,.2f}")


if __name__ == "__main__":
    main()
