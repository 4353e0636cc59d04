"""`grader lint` at 30k/100k/300k synthetic code documents: wall time, peak memory, planted duplicates found.

    .venv/bin/python bench/lint.py [--sizes 30000,100000,300000] [--workdir bench/out/lint] [--datasketch DIR]

Each corpus is bench/synthetic_corpus.py's (CoIR APPS lengths, code-like), plus planted copies: for 0.5% of the
documents an exact copy (whitespace changed) and for another 0.5% a copy with every identifier renamed. The lint
runs in a fresh child process (`python -m grader lint DIR --json --out ...`); its wall time and peak RSS
(``ru_maxrss`` of that child, from ``os.wait4``) are printed as a Markdown row, with how many planted copies the
report's clusters hold. ``--datasketch DIR`` (a folder holding the datasketch package, e.g. from
``pip install --no-deps --target DIR datasketch``) also times datasketch's MinHash on the first 10,000 documents
against ours, on the same shingles.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_corpus import generate

PLANT_SHARE = 0.005
KEPT = {"def", "if", "is", "not", "None", "return", "for", "in", "raise", "with", "as", "yield"}


def rename(text: str) -> str:
    """``text`` with every identifier but the templates' keywords renamed, consistently."""
    names: dict[str, str] = {}
    return re.sub(r"[A-Za-z_]\w*", lambda m: names.setdefault(m.group(0), m.group(0) if m.group(0) in KEPT else f"r{len(names)}_x"), text)


def make(folder: Path, size: int) -> Path:
    if (folder / "benchmark.json").exists():
        return folder
    generate(folder, size, queries=1000, seed=0)
    corpus = folder / "synthetic" / "corpus.jsonl.gz"
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    step = int(1 / PLANT_SHARE)
    extra = []
    for index in range(0, len(records), step):
        source = records[index]
        extra.append({"_id": f"exact_{source['_id']}", "title": "", "text": "  " + source["text"].replace("\n", "\n ") + "\n"})
        other = records[index + step // 2]
        extra.append({"_id": f"renamed_{other['_id']}", "title": "", "text": rename(other["text"])})
    with gzip.open(corpus, "wt", encoding="utf-8") as handle:
        for record in records + extra:
            handle.write(json.dumps(record) + "\n")
    return folder


def run_lint(folder: Path) -> dict:
    out = folder / "lint.json"
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "grader", "lint", str(folder), "--json", "--out", str(out)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"lint failed with status {status}")
    report = json.loads(out.read_text())
    (task,) = report["tasks"]
    clustered = {doc for cluster in task["clusters"] for doc in cluster}
    planted_exact = [d for d in clustered if d.startswith("exact_")]
    planted_renamed = [d for d in clustered if d.startswith("renamed_")]
    findings = task["findings"]
    return {
        "documents": task["documents"],
        "wall_s": wall,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "exact_found": len(planted_exact),
        "renamed_found": len(planted_renamed),
        "near_pairs": findings["near_duplicate_documents"]["count"],
        "candidates": task["candidate_pairs"],
        "checked": task["checked_pairs"],
    }


def compare_datasketch(folder: Path, directory: str, count: int = 10_000) -> None:
    sys.path.insert(0, directory)
    import numpy as np
    from datasketch import MinHash

    from grader.data.benchmark import load_benchmark_folder
    from grader.integrity.duplicates import DuplicateFinder
    from grader.integrity.minhash import shingle_hashes, signatures

    task = load_benchmark_folder(folder).task("synthetic")
    finder = DuplicateFinder()
    coded = []
    for index, document in enumerate(task.iter_corpus()):
        if index == count:
            break
        codes, view = finder._codes(" ".join(document.text.split()))
        coded.append((codes, view))
    started = time.perf_counter()
    for view in (True, False):
        batch = [codes for codes, v in coded if v == view]
        if batch:
            hashes, offsets = shingle_hashes(batch, finder.shingle_size[view])
            signatures(hashes, offsets, finder.permutations)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    for codes, view in coded:
        hashes, _ = shingle_hashes([codes], finder.shingle_size[view])
        minhash = MinHash(num_perm=len(finder.permutations))
        minhash.update_batch([value.tobytes() for value in np.unique(hashes)])
    theirs = time.perf_counter() - started
    print(f"MinHash of {count} documents ({len(finder.permutations)} permutations, shingles given): ours {ours:.2f} s, datasketch {theirs:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="30000,100000,300000")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/lint"))
    parser.add_argument("--datasketch", default=None, metavar="DIR")
    args = parser.parse_args()
    print(
        "| documents (with planted) | wall s | peak RSS MiB | planted exact found | planted renamed found | near pairs | LSH candidates | checked exactly |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in (int(part) for part in args.sizes.split(",")):
        folder = make(args.workdir / str(size), size)
        planted = len(range(0, size, int(1 / PLANT_SHARE)))
        row = run_lint(folder)
        print(
            f"| {row['documents']:,} | {row['wall_s']:.1f} | {row['peak_rss_mib']:.0f} | {row['exact_found']}/{planted} | "
            f"{row['renamed_found']}/{planted} | {row['near_pairs']} | {row['candidates']:,} | {row['checked']:,} |",
            flush=True,
        )
        if args.datasketch:
            compare_datasketch(folder, args.datasketch)


if __name__ == "__main__":
    main()
