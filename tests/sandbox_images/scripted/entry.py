"""scripted: one image, many behaviours, chosen by the `task` field of /input/task.json.

| task | what it writes to /output/run.jsonl | exit |
|---|---|---|
| `valid` (and any name not below) | a correct run: per query, the documents sharing a word with it, scored by overlap, best top_k | 0 |
| `malformed` | a line that is not JSON | 0 |
| `nan` | a valid run except one score written as the bare token `NaN` | 0 |
| `infinity` | a valid run except one score written as `Infinity` | 0 |
| `unknown-doc` | a valid run plus a hit whose id is not in the corpus | 0 |
| `unknown-query` | a valid run plus a line for a query id that was not asked | 0 |
| `duplicate` | a valid run where one query lists the same document twice | 0 |
| `duplicate-query` | a valid run where one query has two lines | 0 |
| `over-top-k` | a valid run where one query has top_k + 1 hits (distinct documents) | 0 |
| `half` | a valid run for only the first half of the queries (sorted by id) | 0 |
| `empty-file` | an empty run.jsonl | 0 |
| `fail` | nothing; prints an error line | 2 |
"""

import json
import re
from collections import Counter, defaultdict

from harness import log, read_jsonl, read_task, write_run

WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def overlap_run(queries: list[dict], corpus: list[dict], top_k: int) -> list[tuple[str, list[tuple[str, float]]]]:
    postings = defaultdict(list)
    for index, doc in enumerate(corpus):
        for word in words(f"{doc.get('title', '')} {doc['text']}"):
            postings[word].append(index)
    runs = []
    for query in queries:
        counts = Counter()
        for word in words(query["text"]):
            counts.update(postings.get(word, ()))
        best = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        runs.append((query["_id"], [(corpus[index]["_id"], float(count)) for index, count in best]))
    return runs


def lines_of(runs) -> list[str]:
    return [json.dumps({"query_id": qid, "hits": [{"id": d, "score": s} for d, s in hits]}) for qid, hits in runs]


def main() -> int:
    task = read_task()
    behaviour = task.get("task", "valid")
    queries = read_jsonl("queries.jsonl")
    corpus = read_jsonl("corpus.jsonl")
    top_k = int(task.get("top_k", 1000))
    log(f"scripted: behaviour {behaviour!r}: {len(queries)} queries, {len(corpus)} documents, top_k {top_k}")
    if behaviour == "fail":
        log("scripted: error: failing on purpose")
        return 2
    if behaviour == "empty-file":
        write_run([], raw_lines=[])
        return 0
    runs = overlap_run(queries, corpus, top_k)
    # Make sure the first query has at least one hit, so every corruption below has a target.
    if runs and not runs[0][1] and corpus:
        runs[0] = (runs[0][0], [(corpus[0]["_id"], 0.5)])
    if behaviour == "malformed":
        lines = lines_of(runs)
        lines.insert(len(lines) // 2, '{"query_id": "broken", "hits": [')
        write_run([], raw_lines=lines)
    elif behaviour in ("nan", "infinity"):
        lines = lines_of(runs)
        qid, hits = runs[0]
        token = "NaN" if behaviour == "nan" else "Infinity"
        first = f'{{"id": {json.dumps(hits[0][0])}, "score": {token}}}'
        rest = "".join(f', {{"id": {json.dumps(d)}, "score": {s!r}}}' for d, s in hits[1:])
        lines[0] = f'{{"query_id": {json.dumps(qid)}, "hits": [{first}{rest}]}}'
        write_run([], raw_lines=lines)
    elif behaviour == "unknown-doc":
        qid, hits = runs[0]
        runs[0] = (qid, hits[: max(0, top_k - 1)] + [("no-such-document", -1.0)])
        write_run(runs)
    elif behaviour == "unknown-query":
        write_run(runs + [("no-such-query", [(corpus[0]["_id"], 1.0)])])
    elif behaviour == "duplicate":
        qid, hits = runs[0]
        hits = hits[: max(1, top_k - 1)]  # stay within top_k: the duplicate is the only fault
        runs[0] = (qid, hits + [(hits[0][0], hits[0][1] - 1.0)])
        write_run(runs)
    elif behaviour == "duplicate-query":
        write_run(runs + [runs[0]])
    elif behaviour == "over-top-k":
        qid, _ = runs[0]
        runs[0] = (qid, [(doc["_id"], float(-i)) for i, doc in enumerate(corpus[: top_k + 1])])
        if len(corpus) <= top_k:
            log(f"scripted: warning: only {len(corpus)} documents; cannot exceed top_k {top_k}")
        write_run(runs)
    elif behaviour == "half":
        ordered = sorted(runs, key=lambda run: run[0])
        write_run(ordered[: len(ordered) // 2])
    elif behaviour == "wrong-field":
        # "doc_id" instead of the protocol's "id" in every hit
        lines = [json.dumps({"query_id": qid, "hits": [{"doc_id": d, "score": s} for d, s in hits]}) for qid, hits in runs]
        write_run([], raw_lines=lines)
    else:
        write_run(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
