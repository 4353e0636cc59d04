"""Stage an /input folder (docs/protocol.md) from a BEIR task folder, by hand.

Stdlib only, for trying images outside the grader:

    python tests/sandbox_images/stage_input.py grader/bundled/mini/text2code IN OUT \
        [--split test] [--mode retrieve] [--top-k 1000]
    docker run --rm --network none --read-only --tmpfs /tmp \
        -v "$PWD/IN":/input:ro -v "$PWD/OUT":/output IMAGE

Writes IN/task.json, IN/corpus.jsonl (the whole corpus, in the task's order) and
IN/queries.jsonl (only the queries judged in the split, sorted by id); no
judgements. OUT is created empty and writable by the container's user.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
from pathlib import Path


def _open(folder: Path, name: str):
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists():
            opener = gzip.open if candidate.suffix == ".gz" else open
            return opener(candidate, "rt", encoding="utf-8")
    raise SystemExit(f"stage_input: no {name}[.gz] in {folder}")


def _judged(folder: Path, split: str) -> set[str]:
    with _open(folder / "qrels", f"{split}.tsv") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    return {row[0] for row in rows[1:] if row and row[0]} if rows and rows[0][0] == "query-id" else {r[0] for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", type=Path)
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--mode", default="retrieve", choices=["retrieve", "encode"])
    parser.add_argument("--top-k", type=int, default=1000)
    parser.add_argument("--name", help="task name in task.json (default: the folder's name)")
    args = parser.parse_args()

    judged = _judged(args.task, args.split)
    with _open(args.task, "queries.jsonl") as handle:
        queries = [json.loads(line) for line in handle if line.strip()]
    queries = sorted(({"_id": q["_id"], "text": q["text"]} for q in queries if q["_id"] in judged), key=lambda q: q["_id"])
    with _open(args.task, "corpus.jsonl") as handle:
        corpus = [json.loads(line) for line in handle if line.strip()]
    corpus = [{"_id": d["_id"], "title": d.get("title") or "", "text": d["text"]} for d in corpus]

    for folder in (args.input, args.output):
        if folder.exists():
            shutil.rmtree(folder)
    args.input.mkdir(parents=True)
    args.output.mkdir(parents=True)
    os.chmod(args.input, 0o755)
    os.chmod(args.output, 0o777)  # the container runs as uid 10001
    task = {
        "protocol": 1, "task": args.name or args.task.name, "split": args.split, "mode": args.mode,
        "top_k": args.top_k, "query_prefix": "", "document_prefix": "",
        "queries": len(queries), "documents": len(corpus),
    }
    (args.input / "task.json").write_text(json.dumps(task) + "\n", encoding="utf-8")
    for name, records in (("queries.jsonl", queries), ("corpus.jsonl", corpus)):
        with open(args.input / name, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    for path in args.input.iterdir():
        os.chmod(path, 0o644)
    print(f"staged {args.task.name}/{args.split}: {len(queries)} queries, {len(corpus)} documents -> {args.input}")


if __name__ == "__main__":
    main()
