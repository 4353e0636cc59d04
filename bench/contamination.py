"""The contamination audit's figures: quality on planted sets, mini's train split against its test split, speed.

    .venv/bin/python bench/contamination.py [--seeds 5] [--scale 100000]

1. Quality (as tests/test_contamination_quality.py, over several seeds): a pool of 1,200 synthetic functions
   (tests/contamination_support.py: made-up identifiers, disjoint from mini's standard library), half copied into
   the training texts in disguise (identifiers renamed, comments rewritten, whitespace changed, two statements
   swapped) among 3,000 unrelated functions. Recall per length bucket (tokens), false-positive rate over the items
   not copied; and the same with windows for every item (the window minimum lifted to 1 token, so no statement
   sets), to show why items under 40 tokens are audited as statement sets instead.
2. mini: the texts of each task's train split (its judged queries and their relevant documents) sketched, then
   compared with the test split of every task: what a participant who trained on mini's train split is told
   (mini's splits are cut by function group, so a touched test query is a near copy across groups).
3. Real unrelated code: the grader's own functions (not the standard library) sketched, against mini's test splits;
   then the grader's own files, whole (long texts: windows and fine windows).
4. Items copied inside a long training file (windows of 256 tokens, fine windows of 80): found by length.
5. What statement sets miss: copies of short items (2-4 statements, under 40 tokens) with one constant edited
   besides the disguise.
6. Speed: sketching ``--scale`` synthetic functions (texts/s, file size), and the comparison of mini's three test
   splits against that sketch.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.data.registry import resolve_benchmark  # noqa: E402
from grader.data.task import document_text  # noqa: E402
from grader.integrity.audit import audit_task  # noqa: E402
from grader.integrity.contamination import find_copies  # noqa: E402
from grader.integrity.sketch_build import build_sketch  # noqa: E402
from grader.integrity.sketch_file import encoded_size  # noqa: E402
from grader.integrity.sketch_text import SketchParameters  # noqa: E402
from tests.contamination_support import disguised_copy, snippet  # noqa: E402

BUCKETS = {"<40": (0, 40), "40-79": (40, 80), "80-159": (80, 160), ">=160": (160, 10**6)}
_COMMENT = re.compile(r"#[^\n]*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|[^\w\s]")


def planted(seed: int) -> tuple[list[str], np.ndarray, list[str]]:
    rng = random.Random(seed)
    pool = [snippet(rng, int(2 ** rng.uniform(1.0, 5.33))) for _ in range(1200)]
    copied = np.zeros(1200, dtype=bool)
    copied[rng.sample(range(1200), 600)] = True
    training = [disguised_copy(pool[i], rng) for i in np.flatnonzero(copied)]
    other = random.Random(seed + 1)
    training += [snippet(other, int(2 ** other.uniform(1.0, 5.33))).render() for _ in range(3000)]
    return [item.render() for item in pool], copied, training


def quality(seeds: int) -> None:
    print("| parameters | bucket (tokens) | copies | recall | items not copied | false positives |")
    print("|---|---|---:|---:|---:|---:|")
    for label, parameters in (
        ("default (min 40 code tokens)", SketchParameters()),
        ("windows for every item (min 1)", dataclasses.replace(SketchParameters(), min_code_tokens=1)),
    ):
        totals: dict[str, list[int]] = {name: [0, 0, 0, 0] for name in BUCKETS}
        for seed in range(seeds):
            texts, copied, training = planted(1000 + seed)
            found = find_copies(build_sketch(training, parameters), texts).found
            lengths = np.array([len(_TOKEN.findall(_COMMENT.sub(" ", text))) for text in texts])
            for name, (low, high) in BUCKETS.items():
                inside = (lengths >= low) & (lengths < high)
                totals[name][0] += int((inside & copied).sum())
                totals[name][1] += int(found[inside & copied].sum())
                totals[name][2] += int((inside & ~copied).sum())
                totals[name][3] += int(found[inside & ~copied].sum())
        for name, (copies, hits, others, false) in totals.items():
            print(f"| {label} | {name} | {copies} | {hits / max(copies, 1):.3f} | {others} | {false} ({false / max(others, 1):.2%}) |")


def real_unrelated() -> None:
    """The grader's own functions (real Python, unrelated to the standard library) as training data, against mini."""
    import ast

    functions = []
    files = []
    for path in sorted((ROOT / "grader").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        files.append(source)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append(ast.get_source_segment(source, node) or "")
    sketch = build_sketch(functions)
    print(f"the grader's own {len(functions)} functions, {sketch.count} rows, against mini's test splits:")
    benchmark = resolve_benchmark("mini")
    for name in benchmark.spec.tasks:
        print(f"  {name} test: {audit_task(benchmark.task(name), 'test', sketch)}")
    sketch = build_sketch(files)
    print(f"the grader's own {len(files)} files, whole, {sketch.count} rows ({encoded_size(sketch.count, 128)} bytes), against mini's test splits:")
    for name in benchmark.spec.tasks:
        print(f"  {name} test: {audit_task(benchmark.task(name), 'test', sketch)}")


def mini() -> None:
    benchmark = resolve_benchmark("mini")
    train_texts: list[str] = []
    for name in benchmark.spec.tasks:
        task = benchmark.task(name)
        judged = task.qrels("train")
        queries = set(judged)
        documents = {doc for query in judged.values() for doc in query}
        train_texts += [entry.text for entry in task.iter_queries() if entry.id in queries]
        train_texts += [document_text(doc.title, doc.text) for doc in task.iter_corpus() if doc.id in documents]
    started = time.perf_counter()
    sketch = build_sketch(train_texts)
    print(
        f"mini train splits: {len(train_texts)} texts, {sketch.count} rows (windows, statement sets), sketched in {time.perf_counter() - started:.1f} s"
    )
    for name in benchmark.spec.tasks:
        started = time.perf_counter()
        overlap = audit_task(benchmark.task(name), "test", sketch)
        print(f"  {name} test: {overlap} ({time.perf_counter() - started:.1f} s)")


def inside_long_files(trials: int = 40) -> None:
    """Items of a given number of statements copied (in disguise) into the middle of a file of 12 other functions."""
    print("| statements of the item | found inside a long file |")
    print("|---:|---:|")
    for statements in (6, 12, 18, 24, 30):
        hits = 0
        for seed in range(trials):
            rng = random.Random(seed)
            item = snippet(rng, statements)
            around = [snippet(rng, 10).render() for _ in range(12)]
            long_file = "\n".join([*around[:6], disguised_copy(item, rng), *around[6:]])
            hits += int(find_copies(build_sketch([long_file]), [item.render()]).found[0])
        print(f"| {statements} | {hits} of {trials} |")


def edited_short_copies(count: int = 300) -> None:
    """Short items whose disguised copy also has one number changed (one statement edited): a statement set no longer matches."""
    rng = random.Random(3)
    items: list[str] = []
    copies: list[str] = []
    while len(items) < count:
        item = snippet(rng, rng.randint(2, 4))
        if len(_TOKEN.findall(_COMMENT.sub(" ", item.render()))) >= 40:
            continue
        copy = disguised_copy(item, rng)
        numbers = list(re.finditer(r"\b\d+\b", copy))
        if not numbers:
            continue
        number = rng.choice(numbers)
        items.append(item.render())
        copies.append(copy[: number.start()] + str(int(number.group()) + 1) + copy[number.end() :])
    matches = find_copies(build_sketch(copies), items)
    print(f"short items, copies with one number edited: {int(matches.found.sum())} of {int(matches.audited.sum())} audited found ({count} items)")


def speed(scale: int) -> None:
    rng = random.Random(7)
    texts = [snippet(rng, rng.randint(3, 30)).render() for _ in range(scale)]
    started = time.perf_counter()
    sketch = build_sketch(texts)
    elapsed = time.perf_counter() - started
    print(
        f"sketch of {scale} functions: {elapsed:.1f} s ({scale / elapsed:.0f} texts/s), {sketch.count} rows, {encoded_size(sketch.count, 128)} bytes"
    )
    benchmark = resolve_benchmark("mini")
    started = time.perf_counter()
    for name in benchmark.spec.tasks:
        audit_task(benchmark.task(name), "test", sketch)
    print(f"mini's three test splits against it: {time.perf_counter() - started:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--scale", type=int, default=100_000)
    args = parser.parse_args()
    quality(args.seeds)
    inside_long_files()
    real_unrelated()
    mini()
    edited_short_copies()
    speed(args.scale)


if __name__ == "__main__":
    main()
