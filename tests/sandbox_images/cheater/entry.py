"""cheater: answers from the staged ids or positions, never from the text; behaviour chosen by `task` in /input/task.json.

Against a grader that stages a benchmark's own ids in its own order, each of
these scores perfectly on data whose query ``q-<n>`` is answered by document
``c-<n>`` (CAT's importer makes such pairs) and whose corpus is in id order.
Against pseudonymous ids sorted by pseudonym they are random rankings.

| task | what it writes | exit |
|---|---|---|
| `by-id` | retrieve: per query, the documents whose id ends in the same number first (score 1), then the rest in corpus order (score 0), best top_k | 0 |
| `by-position` | retrieve: the query at row i of queries.jsonl ranks the document at row i first, then by circular distance of rows, best top_k | 0 |
| `encode-by-position` | encode: row i of either file becomes the 2-d unit vector at angle 2 pi i / n (n: the larger file's rows), so the query at row i is closest to the document at row i | 0 |
"""

import math
import re
import struct
from array import array

from harness import log, read_jsonl, read_task, write_bytes, write_run

NUMBER = re.compile(r"(\d+)$")


def number(identifier: str) -> str | None:
    match = NUMBER.search(identifier)
    return match.group(1).lstrip("0") or "0" if match else None


def by_id(queries: list[dict], corpus: list[dict], top_k: int) -> list:
    by_number: dict[str, list[int]] = {}
    for row, doc in enumerate(corpus):
        key = number(doc["_id"])
        if key is not None:
            by_number.setdefault(key, []).append(row)
    runs = []
    for query in queries:
        matched = by_number.get(number(query["_id"]) or "", [])
        chosen = set(matched)
        rest = [row for row in range(len(corpus)) if row not in chosen]
        ranked = [(corpus[row]["_id"], 1.0) for row in matched] + [(corpus[row]["_id"], 0.0) for row in rest]
        runs.append((query["_id"], ranked[:top_k]))
    return runs


def by_position(queries: list[dict], corpus: list[dict], top_k: int) -> list:
    n = len(corpus)
    runs = []
    for i, query in enumerate(queries):
        rows = [(i + step) % n for step in range(min(top_k, n))]
        runs.append((query["_id"], [(corpus[row]["_id"], float(n - step)) for step, row in enumerate(rows)]))
    return runs


def npy(rows: list[list[float]]) -> bytes:
    """A float32 .npy v1.0 file of ``rows`` (each of two columns)."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({len(rows)}, 2), }}"
    header = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    values = array("f", (v for row in rows for v in row))
    if struct.pack("=H", 1) != struct.pack("<H", 1):
        values.byteswap()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + values.tobytes()


def circle(count: int, n: int) -> list[list[float]]:
    return [[math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)] for i in range(count)]


def main() -> int:
    task = read_task()
    behaviour = task.get("task", "by-id")
    queries = read_jsonl("queries.jsonl")
    corpus = read_jsonl("corpus.jsonl")
    top_k = int(task.get("top_k", 1000))
    log(f"cheater: behaviour {behaviour!r}: {len(queries)} queries, {len(corpus)} documents; first ids {queries[0]['_id']!r}, {corpus[0]['_id']!r}")
    if behaviour == "encode-by-position":
        n = max(len(queries), len(corpus), 1)
        write_bytes("queries.npy", npy(circle(len(queries), n)))
        write_bytes("corpus.npy", npy(circle(len(corpus), n)))
        return 0
    write_run(by_position(queries, corpus, top_k) if behaviour == "by-position" else by_id(queries, corpus, top_k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
