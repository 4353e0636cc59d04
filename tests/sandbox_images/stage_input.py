"""Stage an /input folder (docs/protocol.md) from a BEIR task folder, by hand, as grading stages it.

Stdlib only, for trying images outside the grader:

    python tests/sandbox_images/stage_input.py grader/bundled/mini/text2code IN OUT \
        [--split test] [--mode retrieve] [--top-k 1000] [--key BLINDING_KEY]
    docker run --rm --network none --read-only --tmpfs /tmp \
        -v "$PWD/IN":/input:ro -v "$PWD/OUT":/output IMAGE
    python tests/sandbox_images/unblind_run.py IN.ids.tsv OUT/run.jsonl run.jsonl

Writes IN/task.json, IN/corpus.jsonl (the whole corpus) and IN/queries.jsonl (only
the queries judged in the split); no judgements. As in grading (docs/protocol.md,
"What the container sees"), every id is a pseudonym, a keyed hash of the real id,
and both files are sorted by pseudonym. ``--key`` takes a blinding key file (hex,
one line: ``grader keygen``'s ``blinding.key``, or the ``blinding.key`` a
``grader run`` keeps in its OUT folder), which stages the same ids in the same
order as ``grader run`` with that key; without it a fresh key is used. The way
back, pseudonym -> real id, goes to IN.ids.tsv beside IN, never inside it (the
container must not see it): ``unblind_run.py`` maps a run back with it. OUT is
created empty and writable by the container's user.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import hmac
import json
import os
import secrets
import shutil
from pathlib import Path

#: The pseudonym rule of grader/sandbox/blinding.py (scheme hmac-sha256-96/v1), repeated here without the grader.
ID_DOMAIN = b"grader blinding v1\x00"
KEY_ID_DOMAIN = b"grader blinding key v1\x00"
PSEUDONYM_HEX = 24


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


def _key(path: Path | None) -> bytes:
    if path is None:
        return secrets.token_bytes(32)
    try:
        key = bytes.fromhex(path.read_text(encoding="ascii").strip())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise SystemExit(f"stage_input: {path}: not a readable hex blinding key ({type(error).__name__})") from None
    if len(key) < 16:
        raise SystemExit(f"stage_input: {path}: a blinding key has at least 16 bytes")
    return key


def _blinded(key: bytes, task: str, kind: str, records: list[dict]) -> list[tuple[str, dict]]:
    """Each record under its pseudonym, sorted by pseudonym; two ids with one pseudonym stop the staging."""
    name = task.encode("utf-8")
    prefix = ID_DOMAIN + kind.encode("ascii") + len(name).to_bytes(4, "big") + name
    named = sorted(
        (kind + hmac.digest(key, prefix + r["_id"].encode("utf-8", "surrogatepass"), "sha256").hex()[:PSEUDONYM_HEX], r) for r in records
    )
    for (before, _), (after, _) in zip(named, named[1:]):
        if before == after:
            raise SystemExit(f"stage_input: two ids share the pseudonym {before}: stage with another key")
    return named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", type=Path)
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--split", default="test")
    parser.add_argument("--mode", default="retrieve", choices=["retrieve", "encode"])
    parser.add_argument("--top-k", type=int, default=1000)
    parser.add_argument("--name", help="task name in task.json (default: the folder's name)")
    parser.add_argument("--key", type=Path, help="blinding key file (hex); default: a fresh key")
    args = parser.parse_args()
    name = args.name or args.task.name
    key = _key(args.key)
    ids_path = args.input.with_name(args.input.name + ".ids.tsv")

    judged = _judged(args.task, args.split)
    with _open(args.task, "queries.jsonl") as handle:
        queries = [json.loads(line) for line in handle if line.strip()]
    queries = [{"_id": q["_id"], "text": q["text"]} for q in queries if q["_id"] in judged]
    with _open(args.task, "corpus.jsonl") as handle:
        corpus = [json.loads(line) for line in handle if line.strip()]
    corpus = [{"_id": d["_id"], "title": d.get("title") or "", "text": d["text"]} for d in corpus]
    blinded = {"queries.jsonl": _blinded(key, name, "q", queries), "corpus.jsonl": _blinded(key, name, "d", corpus)}

    for folder in (args.input, args.output):
        if folder.exists():
            shutil.rmtree(folder)
    args.input.mkdir(parents=True)
    args.output.mkdir(parents=True)
    os.chmod(args.input, 0o755)
    os.chmod(args.output, 0o777)  # the container runs as uid 10001
    task = {
        "protocol": 1, "task": name, "split": args.split, "mode": args.mode,
        "top_k": args.top_k, "query_prefix": "", "document_prefix": "",
        "queries": len(queries), "documents": len(corpus),
    }
    (args.input / "task.json").write_text(json.dumps(task) + "\n", encoding="utf-8")
    for file_name, records in blinded.items():
        with open(args.input / file_name, "w", encoding="utf-8") as handle:
            for pseudonym, record in records:
                handle.write(json.dumps({**record, "_id": pseudonym}, ensure_ascii=False) + "\n")
    for path in args.input.iterdir():
        os.chmod(path, 0o644)
    with open(ids_path, "w", encoding="utf-8") as handle:
        for records in blinded.values():
            for pseudonym, record in records:
                handle.write(f"{pseudonym}\t{json.dumps(record['_id'], ensure_ascii=False)}\n")
    key_id = hashlib.sha256(KEY_ID_DOMAIN + key).hexdigest()
    print(f"staged {args.task.name}/{args.split}: {len(queries)} queries, {len(corpus)} documents -> {args.input}")
    print(f"blinding key id {key_id[:16]}...; the way back: {ids_path}")


if __name__ == "__main__":
    main()
