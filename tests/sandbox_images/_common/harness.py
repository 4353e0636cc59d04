"""Shared stdlib helpers of the misbehaving test images (copied next to entry.py).

Reads the staged task of docs/protocol.md from /input and writes outputs to
/output the way a careful submission would (temp file, then rename), so that
each image misbehaves only in the one way it is meant to.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

INPUT = "/input"
OUTPUT = "/output"


def log(message: str) -> None:
    """One line on stderr, flushed at once (the grader shows the last one)."""
    print(message, file=sys.stderr, flush=True)


def read_task() -> dict:
    with open(os.path.join(INPUT, "task.json"), encoding="utf-8") as handle:
        return json.load(handle)


def read_jsonl(name: str) -> list[dict]:
    with open(os.path.join(INPUT, name), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_bytes(name: str, data: bytes) -> None:
    """Write /output/NAME atomically, readable by the host."""
    fd, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=OUTPUT)
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(partial, os.path.join(OUTPUT, name))


def write_run(runs: list[tuple[str, list[tuple[str, float]]]], *, raw_lines: list[str] | None = None) -> None:
    """Write /output/run.jsonl from (query id, [(doc id, score), ...]) pairs, or raw lines as given."""
    if raw_lines is None:
        raw_lines = [
            json.dumps({"query_id": qid, "hits": [{"id": doc, "score": score} for doc, score in hits]})
            for qid, hits in runs
        ]
    write_bytes("run.jsonl", "".join(line + "\n" for line in raw_lines).encode("utf-8"))


def empty_run() -> None:
    """A valid run that answers every query with no hits."""
    write_run([(query["_id"], []) for query in read_jsonl("queries.jsonl")])
