"""encoder: an encode-mode submission with a hashing bag-of-words, numpy-free.

Writes /output/queries.npy and /output/corpus.npy (float32, C order, one
L2-normalised row per input line, DIM columns) in the .npy v1.0 format by hand.
The `task` field of /input/task.json picks a fault for the grader's validation:

| task | output | exit |
|---|---|---|
| anything not below | valid arrays | 0 |
| `nan` | a NaN in corpus.npy | 0 |
| `dims` | queries.npy with DIM - 1 columns | 0 |
| `rows` | corpus.npy one row short | 0 |
| `float64` | corpus.npy as float64 | 0 |
| `object` | corpus.npy with dtype object (a pickle payload) | 0 |
| `fortran` | corpus.npy flagged fortran_order | 0 |
| `truncated` | corpus.npy cut short of its header's shape | 0 |
"""

import math
import re
import struct
import zlib
from array import array

from harness import log, read_jsonl, read_task, write_bytes

DIM = 256
WORD = re.compile(r"[a-z0-9]+")


def npy(rows: list[list[float]], columns: int, *, descr: str = "<f4", fortran: bool = False, payload: bytes | None = None) -> bytes:
    """A .npy v1.0 file: magic, header length, padded header dict, then the data."""
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({len(rows)}, {columns}), }}"
    padding = 64 - (10 + len(header) + 1) % 64
    header = header + " " * (padding % 64) + "\n"
    if payload is None:
        values = array("f" if descr == "<f4" else "d", (v for row in rows for v in row))
        if struct.pack("=H", 1) != struct.pack("<H", 1):
            values.byteswap()
        payload = values.tobytes()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + payload


def embed(text: str) -> list[float]:
    vector = [0.0] * DIM
    for word in WORD.findall(text.lower()):
        h = zlib.crc32(word.encode("utf-8"))
        vector[h % DIM] += 1.0 if (h >> 16) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def main() -> int:
    task = read_task()
    fault = task.get("task", "")
    queries = read_jsonl("queries.jsonl")
    corpus = read_jsonl("corpus.jsonl")
    q_rows = [embed(task.get("query_prefix", "") + q["text"]) for q in queries]
    d_rows = [embed(f"{task.get('document_prefix', '')}{d.get('title', '')} {d['text']}") for d in corpus]
    log(f"encoder: fault {fault or 'none'!r}: {len(q_rows)} queries, {len(d_rows)} documents, dim {DIM}")

    q_columns = DIM
    if fault == "dims":
        q_rows, q_columns = [row[:-1] for row in q_rows], DIM - 1
    corpus_kwargs = {}
    if fault == "nan" and d_rows:
        d_rows[0][0] = float("nan")
    elif fault == "rows":
        d_rows = d_rows[:-1]
    elif fault == "float64":
        corpus_kwargs = {"descr": "<f8"}
    elif fault == "object":
        import pickle

        corpus_kwargs = {"descr": "|O", "payload": pickle.dumps(d_rows, protocol=2)}
    elif fault == "fortran":
        corpus_kwargs = {"fortran": True}
    corpus_bytes = npy(d_rows, DIM, **corpus_kwargs)
    if fault == "truncated":
        corpus_bytes = corpus_bytes[: len(corpus_bytes) - 4 * DIM - 3]
    write_bytes("queries.npy", npy(q_rows, q_columns))
    write_bytes("corpus.npy", corpus_bytes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
