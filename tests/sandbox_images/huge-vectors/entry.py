"""huge-vectors: an encode-mode submission whose vectors are finite but huge, numpy-free.

Writes /output/queries.npy and /output/corpus.npy (float32, C order, one row per
input line, DIM columns) in the .npy v1.0 format by hand. Each row is a sign
pattern from a hash of the text's words, scaled so that every entry is +-SCALE:
finite in float32 (largest 3.4e38), but inner products of two rows (DIM * 1e60)
overflow float32 (faiss scores in float32). The `task` field of
/input/task.json picks which side is huge:

| task | output | exit |
|---|---|---|
| `huge-corpus` | corpus.npy entries +-1e30, queries.npy L2-normalised | 0 |
| `huge-queries` | queries.npy entries +-1e30, corpus.npy L2-normalised | 0 |
| `huge-both` | both files +-1e30 | 0 |
| any other name | both files L2-normalised (a valid submission) | 0 |
"""

import math
import re
import struct
import zlib
from array import array

from harness import log, read_jsonl, read_task, write_bytes

DIM = 64
SCALE = 1e30
WORD = re.compile(r"[a-z0-9]+")


def npy(rows: list[list[float]]) -> bytes:
    """A float32 .npy v1.0 file: magic, header length, padded header dict, then the data."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({len(rows)}, {DIM}), }}"
    header = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    values = array("f", (v for row in rows for v in row))
    if struct.pack("=H", 1) != struct.pack("<H", 1):
        values.byteswap()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + values.tobytes()


def signs(text: str) -> list[float]:
    """+-1 per column: the sign of the column's hashed word count (+1 where it is zero)."""
    counts = [0] * DIM
    for word in WORD.findall(text.lower()):
        h = zlib.crc32(word.encode("utf-8"))
        counts[h % DIM] += 1 if (h >> 16) & 1 else -1
    return [1.0 if c >= 0 else -1.0 for c in counts]


def rows_of(texts: list[str], huge: bool) -> list[list[float]]:
    scale = SCALE if huge else 1.0 / math.sqrt(DIM)
    return [[s * scale for s in signs(text)] for text in texts]


def main() -> int:
    behaviour = read_task().get("task", "valid")
    queries = [q["text"] for q in read_jsonl("queries.jsonl")]
    corpus = [f"{d.get('title', '')} {d['text']}" for d in read_jsonl("corpus.jsonl")]
    huge_queries = behaviour in ("huge-queries", "huge-both")
    huge_corpus = behaviour in ("huge-corpus", "huge-both")
    log(f"huge-vectors: {behaviour!r}: {len(queries)} queries (huge: {huge_queries}), {len(corpus)} documents (huge: {huge_corpus}), dim {DIM}")
    write_bytes("queries.npy", npy(rows_of(queries, huge_queries)))
    write_bytes("corpus.npy", npy(rows_of(corpus, huge_corpus)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
