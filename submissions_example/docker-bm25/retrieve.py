"""A BM25 retrieve-mode submission (docs/protocol.md, protocol 1).

Reads /input/task.json, /input/corpus.jsonl and /input/queries.jsonl, indexes
the corpus with bm25s, and writes /output/run.jsonl: one line per query with at
most top_k hits. Tokenisation is code-aware: split on anything that is not a
letter or digit, then split camelCase and letter/digit boundaries, lower-case.
Only the standard library, numpy and bm25s are used.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time

import bm25s
import numpy as np

INPUT = "/input"
OUTPUT = "/output"
K1 = 0.9  # Anserini's defaults, which suit short code and docstrings
B = 0.4

_WORD = re.compile(r"[^\W_]+")  # runs of letters/digits: splits snake_case and punctuation
_PIECE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")  # camelCase, HTTPServer, v2


def tokenize(text: str) -> list[str]:
    """Lower-cased identifier pieces: `parseHTTPResponse_v2` -> parse, http, response, v, 2."""
    tokens = []
    for word in _WORD.findall(text):
        pieces = _PIECE.findall(word) if word.isascii() else [word]
        tokens.extend(piece.lower() for piece in pieces)
    return tokens


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def log(message: str) -> None:
    print(f"bm25: {message}", file=sys.stderr, flush=True)


def main() -> int:
    started = time.monotonic()
    with open(os.path.join(INPUT, "task.json"), encoding="utf-8") as handle:
        task = json.load(handle)
    if task.get("mode", "retrieve") != "retrieve":
        log(f"error: this image only retrieves; task mode is {task.get('mode')!r}")
        return 2
    corpus = read_jsonl(os.path.join(INPUT, "corpus.jsonl"))
    queries = read_jsonl(os.path.join(INPUT, "queries.jsonl"))
    query_prefix = task.get("query_prefix") or ""
    document_prefix = task.get("document_prefix") or ""
    doc_ids = [doc["_id"] for doc in corpus]
    log(f"task {task.get('task')}/{task.get('split')}: {len(queries)} queries, {len(corpus)} documents")

    retriever = bm25s.BM25(k1=K1, b=B)
    texts = (f"{document_prefix}{doc.get('title') or ''} {doc.get('text') or ''}" for doc in corpus)
    retriever.index([tokenize(text) for text in texts], show_progress=False)
    vocab = retriever.vocab_dict
    empty = vocab[""]  # bm25s adds an empty token, scoring nothing, for queries with no known token

    top_k = max(0, min(int(task.get("top_k", 1000)), len(corpus)))
    lines = []
    if top_k and queries:
        query_ids = []
        for query in queries:
            ids = sorted({vocab[t] for t in tokenize(query_prefix + query["text"]) if t in vocab})
            query_ids.append(ids or [empty])
        documents, scores = retriever.retrieve(query_ids, k=top_k, show_progress=False, n_threads=0)
    for row, query in enumerate(queries):
        hits = []
        if top_k:
            for doc, score in zip(documents[row].tolist(), scores[row].tolist()):
                if score > 0 and math.isfinite(score):  # a document sharing no term is no hit
                    hits.append({"id": doc_ids[doc], "score": round(float(score), 6)})
        lines.append(json.dumps({"query_id": query["_id"], "hits": hits}, ensure_ascii=False))

    # Write next to the target and rename: a kill never leaves a partial run.jsonl.
    fd, partial = tempfile.mkstemp(prefix=".run.", suffix=".partial", dir=OUTPUT)
    os.fchmod(fd, 0o644)  # readable by a grader that is not uid 10001
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + ("\n" if lines else ""))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, os.path.join(OUTPUT, "run.jsonl"))
    log(f"wrote {len(lines)} queries, top {top_k}, in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
