"""A small BM25 baseline that writes a JSONL run for one task of a benchmark.

It exists so the demo has a real, non-trivial run to grade before any model is
involved; it is a demonstration, not part of the grader. Usage:

    python scripts/bm25_baseline.py TASK_DIR --split test --out run.jsonl [--top-k 100]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.data.task import Task
from grader.files import atomic_write_text

_WORD = re.compile(r"[A-Za-z]+|[0-9]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def tokenize(text: str) -> list[str]:
    """Lower-cased word pieces, splitting snake_case and camelCase identifiers."""
    return [piece.lower() for word in _WORD.findall(text) for piece in _CAMEL.split(word) if piece]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--k1", type=float, default=0.9)
    parser.add_argument("--b", type=float, default=0.4)
    args = parser.parse_args()

    task = Task(args.task)
    judged = set(task.qrels(args.split))
    postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
    doc_ids: list[str] = []
    lengths: list[int] = []
    for doc in task.iter_corpus():
        terms = Counter(tokenize(f"{doc.title} {doc.text}"))
        for term, count in terms.items():
            postings[term].append((len(doc_ids), count))
        doc_ids.append(doc.id)
        lengths.append(sum(terms.values()))
    n_docs = len(doc_ids)
    average = sum(lengths) / max(n_docs, 1)
    idf = {term: math.log(1 + (n_docs - len(p) + 0.5) / (len(p) + 0.5)) for term, p in postings.items()}

    lines = []
    for query in task.iter_queries():
        if query.id not in judged:
            continue
        scores: dict[int, float] = defaultdict(float)
        for term in set(tokenize(query.text)):
            for doc, count in postings.get(term, ()):
                norm = count + args.k1 * (1 - args.b + args.b * lengths[doc] / average)
                scores[doc] += idf[term] * count * (args.k1 + 1) / norm
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[: args.top_k]
        hits = [{"id": doc_ids[doc], "score": round(score, 6)} for doc, score in best]
        lines.append(json.dumps({"query_id": query.id, "hits": hits}))
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    print(f"{args.task.name}: {len(lines)} queries ranked over {n_docs} documents -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
