"""A process that checks and merges shard runs in threads as ``grader serve`` does, round after round; run by
tests/hosting/test_allocator.py as ``python -m tests.hosting.merge_memory_child MODE`` (``returning``: with the
server's allocator setting and its trim after a merge; ``default``: glibc's own). Prints one JSON line: the
process's anonymous resident memory (``RssAnon``, bytes) before the first round and after each, and the bytes of
one round's shard runs.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from grader.hosting.allocator import release_free_memory, return_large_buffers
from grader.retrieval.shard_exchange import check_shard_run, dense_run, merge_compact_runs, search_width

QUERIES, DEPTH, DOCUMENTS, SHARDS, ROUNDS = 300, 1000, 40_000, 4, 5


def anonymous_rss() -> int:
    """This process's ``RssAnon``, bytes."""
    with open("/proc/self/status", "rb") as handle:
        for line in handle:
            if line.startswith(b"RssAnon:"):
                return int(line.split()[1]) * 1024
    raise OSError("no RssAnon")


def shard_run(shard: int) -> bytes:
    """Shard ``shard``'s run: every query's top hits (and a boundary's worth more) among its own documents."""
    rng = np.random.default_rng(shard)
    per = DOCUMENTS // SHARDS
    width = search_width(DEPTH)
    docs = np.argsort(rng.random((QUERIES, per)), axis=1)[:, :width] + shard * per
    scores = -np.sort(-rng.random((QUERIES, width)), axis=1)
    return dense_run(scores, docs, documents=DOCUMENTS, depth=DEPTH)


def main(mode: str) -> None:
    if mode == "returning":
        return_large_buffers()
    runs = [shard_run(shard) for shard in range(SHARDS)]  # kept: the files a server reads each round, here in memory
    pool = ThreadPoolExecutor(8)  # the server's requests run in a pool of threads, each with its own arena

    def check(shard: int) -> None:
        check_shard_run(bytes(runs[shard]), documents=DOCUMENTS, queries=QUERIES, depth=DEPTH)

    def merge() -> int:
        return len(merge_compact_runs((bytes(run) for run in runs), documents=DOCUMENTS, queries=QUERIES, depth=DEPTH))

    before, after = anonymous_rss(), []
    for _ in range(ROUNDS):
        list(pool.map(check, range(SHARDS)))  # each put's check, in the threads the puts came on
        pool.submit(merge).result()
        if mode == "returning":
            release_free_memory()
        after.append(anonymous_rss())
    print(json.dumps({"before": before, "after": after, "round_bytes": sum(len(run) for run in runs)}))


if __name__ == "__main__":
    main(sys.argv[1])
