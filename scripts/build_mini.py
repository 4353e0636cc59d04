#!/usr/bin/env python3
"""Build the bundled ``mini`` benchmark from the Python standard library sources.

The benchmark has three retrieval tasks in BEIR's layout, all derived from the
functions and methods of the ``.py`` files of the running interpreter's
standard library:

``text2code``
    query: the summary (first paragraph) of a function's docstring;
    document: the function's source with the docstring removed.
``code2code``
    query: the function's header and the first half of its body lines;
    document: the second half of the body.
``code2text``
    query: the function's source with the docstring removed;
    document: the full (cleaned) docstring.

Every query has exactly one relevant document; the corpus of a task holds the
documents of all its splits (as CoIR does), so a query competes against every
document of the task, not only those of its split.

Splits (about 60% train, 10% dev, 30% test of each task's queries) are drawn
per function, not per pair, and shared by the three tasks: a function whose
text2code pair is in test has its code2code and code2text pairs in test too,
so training on any task's train split never shows a dev or test function.
Functions that share a text (copies in two modules, equal docstrings, one
holding another's code) form one group and are split together; see
:func:`function_groups`.

The output is deterministic for a given Python version: files are visited in
sorted order, every random choice comes from ``random.Random`` with a fixed
seed, and the gzip headers carry neither a timestamp nor a file name, so a
rebuild yields byte-identical files.  A different Python version has a
different standard library and so gives different data.

Usage::

    python scripts/build_mini.py                       # into grader/bundled/mini
    python scripts/build_mini.py OUT --stdlib DIR      # another source or target
"""

from __future__ import annotations

import argparse
import ast
import gzip
import io
import json
import os
import platform
import random
import sys
import sysconfig
import textwrap
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "grader" / "bundled" / "mini"
SCHEMA_PATH = REPO_ROOT / "grader" / "schemas" / "benchmark.schema.json"

# Fixed seed: changing it changes every id and every split, so it is part of
# the benchmark's definition (recorded in benchmark.json).
SEED = 20240611

# Version 2 splits by function (shared by all tasks); version 1 split every task
# on its own, which put many dev/test functions in another task's train split.
# Scores on the two are not comparable.
BENCHMARK_VERSION = "2"

# Folders never read.  site-packages holds third-party code (other licences);
# the test suites and idlelib/lib2to3 are large, repetitive and would dominate
# the sample with near-identical test methods.
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"})

# Filters (see the module docstring of each task in TASKS below).
MIN_SUMMARY_WORDS = 4
MIN_BODY_LINES = 4
MIN_CODE2CODE_BODY_LINES = 6
MAX_CHARS = 4000

# Documents (= queries, one relevant document each) kept per task.  About
# up to 5,000 keeps ranking non-trivial while the whole benchmark stays near 3 MB.
DEFAULT_PER_TASK = 5000

# Split fractions of the queries; test gets the remainder (~30%).
SPLIT_FRACTIONS = (("train", 0.6), ("dev", 0.1))
SPLITS = ("train", "dev", "test")

GZIP_LEVEL = 9


@dataclass(frozen=True)
class Function:
    """One function or method of the standard library, ready to be turned into pairs."""

    qualname: str
    """Dotted name, e.g. ``json.decoder.JSONDecoder.decode`` (used only in error messages)."""
    code: str
    """Dedented source with the docstring statement removed (decorators excluded)."""
    header_lines: int
    """Number of leading lines of ``code`` that form the ``def`` header."""
    docstring: str | None
    """The cleaned docstring (``inspect.cleandoc``), or ``None``."""


@dataclass(frozen=True)
class Pair:
    """A query and its one relevant document."""

    query: str
    document: str


@dataclass(frozen=True)
class TaskSpec:
    """How one task turns functions into query/document pairs."""

    name: str
    prefix: str
    kind: str
    description: str
    make_pair: Callable[[Function], Pair | None]


@dataclass(frozen=True)
class Sample:
    """The pairs kept for one task, before they are split and written."""

    spec: TaskSpec
    pairs: list[tuple[int, Pair]]
    """``(function index, pair)`` in the task's shuffled order (the order of the query ids)."""
    doc_numbers: list[int]
    """The document number of each pair: a permutation independent of the query order."""
    candidates: int
    """Usable pairs before sampling."""


# ---------------------------------------------------------------------------
# Reading the standard library
# ---------------------------------------------------------------------------


def iter_source_files(root: Path) -> Iterator[Path]:
    """Yield the ``.py`` files under ``root`` in sorted order of their relative path.

    Sorting (rather than relying on ``os.walk``'s directory order, which depends
    on the file system) is what makes the build reproducible.
    """
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        # Prune in place so skipped trees are never entered.
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel_folder = Path(folder).relative_to(root)
        for name in files:
            if name.endswith(".py"):
                found.append((rel_folder / name).as_posix())
    for rel in sorted(found):
        yield root / rel


def module_name(root: Path, path: Path) -> str:
    """Dotted module name of ``path`` relative to ``root`` (``json/decoder.py`` -> ``json.decoder``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "__init__"


def read_source(path: Path) -> str | None:
    """Return the decoded source of ``path`` with ``\\n`` line ends, or ``None`` if unreadable.

    ``tokenize.open`` honours PEP 263 coding cookies (a few stdlib files are not
    UTF-8) and translates line ends, so ast line numbers match ``split("\\n")``.
    """
    try:
        with tokenize.open(path) as handle:
            return handle.read()
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def iter_function_nodes(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Yield ``(qualified suffix, node)`` for the module's functions and its classes' methods.

    Definitions guarded by module- or class-level ``if``/``try``/``with`` blocks
    (``if sys.platform == "win32": def ...``) count too: they are still module
    functions or methods.  Methods of nested classes are included; functions
    nested inside functions are not (they are part of their parent's source).
    """

    def walk(body: Sequence[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.If):
                yield from walk(node.body, prefix)
                yield from walk(node.orelse, prefix)
            elif isinstance(node, (ast.Try, ast.TryStar)):
                for block in (node.body, *(handler.body for handler in node.handlers), node.orelse, node.finalbody):
                    yield from walk(block, prefix)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                yield from walk(node.body, prefix)

    yield from walk(tree.body, "")


def _only_whitespace(data: bytes) -> bool:
    return not data.strip()


def extract_function(lines: Sequence[str], node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> Function | None:
    """Turn one function node into a :class:`Function`, or ``None`` if it cannot be cleanly cut.

    The docstring is removed by dropping its whole lines, which is only safe
    when it sits on lines of its own; one-liners and functions whose body is
    only a docstring are skipped (they would be too short anyway).
    """
    # ast.get_source_segment re-splits the whole source on every call, which is
    # quadratic over a large module (minutes for the stdlib).  Handing it only
    # the node's own lines, with the location shifted to match, gives the same
    # segment in linear time.  padded=True keeps the first line's indentation,
    # so dedent works for methods.
    start = node.lineno  # the ``def`` line; decorators are not part of the segment
    window = "\n".join(lines[start - 1 : node.end_lineno])
    location = SimpleNamespace(
        lineno=1,
        end_lineno=node.end_lineno - start + 1,
        col_offset=node.col_offset,
        end_col_offset=node.end_col_offset,
    )
    segment = ast.get_source_segment(window, location, padded=True)  # type: ignore[arg-type]
    if segment is None or not node.body:
        return None
    seg_lines = segment.split("\n")
    if len(seg_lines) != node.end_lineno - start + 1:
        return None

    first = node.body[0]
    docstring = ast.get_docstring(node, clean=True)
    if docstring is not None:
        assert isinstance(first, ast.Expr)
        if len(node.body) < 2:
            return None
        # col offsets are UTF-8 byte offsets: compare bytes, not characters.
        first_line = lines[first.lineno - 1].encode("utf-8")
        last_line = lines[first.end_lineno - 1].encode("utf-8")
        trailing = last_line[first.end_col_offset :].strip()
        if (
            first.lineno <= start
            or not _only_whitespace(first_line[: first.col_offset])
            or (trailing and not trailing.startswith(b"#"))
            or node.body[1].lineno <= first.end_lineno
        ):
            return None
        keep = [line for offset, line in enumerate(seg_lines) if not (first.lineno <= start + offset <= first.end_lineno)]
    else:
        keep = seg_lines
    # The header runs up to the first body statement (the docstring, if any):
    # that covers multi-line signatures, and the docstring lines dropped above
    # all come after it.
    header_lines = first.lineno - start
    if header_lines < 1:
        return None  # ``def f(): x = 1`` style: body shares the header line

    code = textwrap.dedent("\n".join(keep)).rstrip()
    # A method whose body holds a string literal starting in column 0 cannot be
    # dedented; such code (and anything else odd) is dropped by re-parsing.
    try:
        ast.parse(code)
    except SyntaxError:
        return None
    return Function(qualname=qualname, code=code, header_lines=header_lines, docstring=docstring)


def iter_functions(root: Path) -> Iterator[Function]:
    """Yield every usable function of the library under ``root``, in a deterministic order."""
    for path in iter_source_files(root):
        source = read_source(path)
        if source is None:
            continue
        try:
            tree = ast.parse(source, filename=str(path))
        except (SyntaxError, ValueError):
            continue  # e.g. deliberately broken files, or NUL bytes
        lines = source.split("\n")
        module = module_name(root, path)
        for suffix, node in iter_function_nodes(tree):
            function = extract_function(lines, node, f"{module}.{suffix}")
            if function is not None:
                yield function


# ---------------------------------------------------------------------------
# Turning functions into pairs
# ---------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Key for duplicate detection: case-folded, whitespace collapsed."""
    return " ".join(text.casefold().split())


def summary(docstring: str) -> str:
    """First paragraph of a cleaned docstring, joined into one line."""
    paragraph: list[str] = []
    for line in docstring.split("\n"):
        if not line.strip():
            if paragraph:
                break
            continue
        paragraph.append(line.strip())
    return " ".join(" ".join(paragraph).split())


def body_line_count(function: Function) -> int:
    """Non-blank lines of the body (docstring already removed)."""
    return sum(1 for line in function.code.split("\n")[function.header_lines :] if line.strip())


def _fits(*texts: str) -> bool:
    return all(0 < len(text) <= MAX_CHARS for text in texts)


def text2code_pair(function: Function) -> Pair | None:
    """Docstring summary -> code without docstring."""
    if function.docstring is None or body_line_count(function) < MIN_BODY_LINES:
        return None
    query = summary(function.docstring)
    if len(query.split()) < MIN_SUMMARY_WORDS or not _fits(query, function.code):
        return None
    return Pair(query, function.code)


def code2text_pair(function: Function) -> Pair | None:
    """Code without docstring -> full docstring."""
    if function.docstring is None or body_line_count(function) < MIN_BODY_LINES:
        return None
    if len(summary(function.docstring).split()) < MIN_SUMMARY_WORDS or not _fits(function.code, function.docstring):
        return None
    return Pair(function.code, function.docstring)


def code2code_pair(function: Function) -> Pair | None:
    """Header + first half of the body -> second half of the body.

    The halves are counted in non-blank lines; the second half is dedented so
    its indentation says nothing about where it was cut from.
    """
    if body_line_count(function) < MIN_CODE2CODE_BODY_LINES or not _fits(function.code):
        return None
    lines = function.code.split("\n")
    header, body = lines[: function.header_lines], lines[function.header_lines :]
    wanted = body_line_count(function) // 2
    seen = 0
    cut = 0
    for index, line in enumerate(body):
        if line.strip():
            seen += 1
            if seen == wanted:
                cut = index + 1
                break
    query = "\n".join(header + body[:cut]).rstrip()
    document = textwrap.dedent("\n".join(body[cut:])).strip("\n").rstrip()
    if not query.strip() or not document.strip():
        return None
    return Pair(query, document)


TASKS: tuple[TaskSpec, ...] = (
    TaskSpec(
        name="text2code",
        prefix="t2c",
        kind="text-to-code",
        description="Query: the summary (first paragraph) of a function's docstring. Document: the function's source with the docstring removed.",
        make_pair=text2code_pair,
    ),
    TaskSpec(
        name="code2code",
        prefix="c2c",
        kind="code-to-code",
        description="Query: a function's header and the first half of its body lines (docstring removed). Document: the second half of the body.",
        make_pair=code2code_pair,
    ),
    TaskSpec(
        name="code2text",
        prefix="c2t",
        kind="code-to-text",
        description="Query: a function's source with the docstring removed. Document: its full docstring.",
        make_pair=code2text_pair,
    ),
)


def collect_pairs(functions: Sequence[Function], make_pair: Callable[[Function], Pair | None]) -> list[tuple[int, Pair]]:
    """``(function index, pair)`` of all functions, dropping any whose query or document duplicates an earlier one.

    Duplicated documents would make the judgements wrong (an identical, unjudged
    copy of the answer would count as a miss); duplicated queries would be
    unanswerable.  The first occurrence in source order wins.  (The copy that
    loses is in the winner's group, see :func:`function_groups`, so it cannot
    turn up in another split through another task.)
    """
    pairs: list[tuple[int, Pair]] = []
    seen_queries: set[str] = set()
    seen_documents: set[str] = set()
    for index, function in enumerate(functions):
        pair = make_pair(function)
        if pair is None:
            continue
        q_key, d_key = normalize(pair.query), normalize(pair.document)
        if q_key in seen_queries or d_key in seen_documents:
            continue
        seen_queries.add(q_key)
        seen_documents.add(d_key)
        pairs.append((index, pair))
    return pairs


# ---------------------------------------------------------------------------
# Splitting by function
# ---------------------------------------------------------------------------
#
# The three tasks are cut from the same functions, so the split is a property
# of the function, not of the pair: a function is in one split for every task
# it takes part in.  (Splitting each task on its own put the code of a
# text2code test document, verbatim, among the code2text train queries.)
#
# The unit is a *group* of functions rather than a single one: functions that
# share a text a task could show are split together.  The standard library has
# copies (the same function in two modules, ``encodings.*.getregentry``),
# functions with the same docstring or summary, and functions whose code holds
# another one's code or code2code half; deduplication keeps the first copy in
# each task, and that can be a different copy in different tasks.  Grouping
# makes every text that occurs in two tasks belong to one split.


class _UnionFind:
    """Disjoint sets over ``0..n-1``; the representative of a set is its smallest member."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, item: int) -> int:
        root = item
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[item] != root:  # path compression
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def shown_texts(function: Function) -> list[str]:
    """The texts of ``function`` that some task may show: code, code2code halves, docstring, summary."""
    texts = [function.code]
    halves = code2code_pair(function)
    if halves is not None:
        texts += [halves.query, halves.document]
    if function.docstring is not None:
        texts += [function.docstring, summary(function.docstring)]
    return texts


def function_groups(functions: Sequence[Function]) -> list[int]:
    """The group of every function: the index of the first function of its group.

    Two functions are in one group (transitively) when a text of one that a
    task may show (code, either code2code half, docstring, docstring summary;
    see :func:`shown_texts`) equals or lies inside the code or the docstring of
    the other.  Texts are compared after case-folding and collapsing whitespace
    (:func:`normalize`), which also catches copies that differ only in
    indentation.  Texts of fewer than :data:`MIN_SUMMARY_WORDS` words are too
    short for any task and are not compared.
    """
    sets = _UnionFind(len(functions))
    # The containers (codes and docstrings), indexed by their words.  Every
    # inner word of a text (all but its first and last) is a whole word of any
    # text that contains it, so the container list of its rarest inner word
    # holds every candidate.
    containers: list[tuple[int, str]] = []
    by_word: dict[str, list[int]] = {}
    for index, function in enumerate(functions):
        for text in (function.code, function.docstring):
            if text is None:
                continue
            slot = len(containers)
            key = normalize(text)
            containers.append((index, key))
            for word in set(key.split(" ")):
                by_word.setdefault(word, []).append(slot)
    for index, function in enumerate(functions):
        for text in shown_texts(function):
            key = normalize(text)
            inner = key.split(" ")[1:-1]
            if len(inner) < MIN_SUMMARY_WORDS - 2:
                continue
            rarest = min(inner, key=lambda word: len(by_word.get(word, ())))
            for slot in by_word.get(rarest, ()):
                owner, container = containers[slot]
                if owner != index and key in container:
                    sets.union(owner, index)
    return [sets.find(index) for index in range(len(functions))]


def assign_splits(groups: Sequence[int], samples: Sequence[Sample], *, seed: int) -> dict[int, str]:
    """The split of every group that has a pair in some task.

    Groups are visited in a random order (bigger groups first, so the small
    ones can even out the counts); each goes to the split that most lacks
    pairs, relative to its target, in the tasks the group has pairs in.  Then
    single groups are moved, or two swapped, while that brings the per-task
    counts closer to :func:`split_sizes` (usually exactly onto them).
    """
    weights: dict[int, list[int]] = {}
    for task, sample in enumerate(samples):
        for index, _ in sample.pairs:
            weights.setdefault(groups[index], [0] * len(samples))[task] += 1
    targets = [split_sizes(len(sample.pairs)) for sample in samples]
    counts = [dict.fromkeys(SPLITS, 0) for _ in samples]

    order = sorted(weights)
    rng = random.Random(f"{seed}:splits")
    rng.shuffle(order)
    order.sort(key=lambda group: -sum(weights[group]))  # stable: random among equals

    def need(group: int, split: str) -> float:
        # How much the split still lacks, relative to its target, in the group's tasks.
        return sum(
            weight * (targets[task][split] - counts[task][split]) / max(targets[task][split], 1)
            for task, weight in enumerate(weights[group])
            if weight
        )

    split_of: dict[int, str] = {}
    for group in order:
        best = max(SPLITS, key=lambda split: need(group, split))  # ties: the first in SPLITS
        split_of[group] = best
        for task, weight in enumerate(weights[group]):
            counts[task][best] += weight

    def error_change(moves: Sequence[tuple[int, str]]) -> int:
        # Change of the total distance to the targets if each group moves to its new split.
        delta: dict[tuple[int, str], int] = {}
        for group, target in moves:
            for task, weight in enumerate(weights[group]):
                if weight:
                    delta[task, split_of[group]] = delta.get((task, split_of[group]), 0) - weight
                    delta[task, target] = delta.get((task, target), 0) + weight
        return sum(
            abs(counts[task][split] + change - targets[task][split]) - abs(counts[task][split] - targets[task][split])
            for (task, split), change in delta.items()
        )

    # Repair: the best single move, or swap of two groups, while one helps.
    # Groups with the same split and the same pairs per task are interchangeable,
    # so only the first of each kind (in the random order) is tried.
    while True:
        kinds: dict[tuple[str, tuple[int, ...]], int] = {}
        for group in order:
            kinds.setdefault((split_of[group], tuple(weights[group])), group)
        firsts = list(kinds.values())
        options: list[list[tuple[int, str]]] = [[(group, split)] for group in firsts for split in SPLITS if split != split_of[group]]
        options += [
            [(first, split_of[second]), (second, split_of[first])]
            for i, first in enumerate(firsts)
            for second in firsts[i + 1 :]
            if split_of[first] != split_of[second]
        ]
        best_change, best = 0, None
        for moves in options:
            change = error_change(moves)
            if change < best_change:
                best_change, best = change, moves
        if best is None:
            break
        for group, target in best:
            for task, weight in enumerate(weights[group]):
                counts[task][split_of[group]] -= weight
                counts[task][target] += weight
            split_of[group] = target
    return split_of


# ---------------------------------------------------------------------------
# Writing a task
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltTask:
    """What was written for one task, for benchmark.json and the README."""

    spec: TaskSpec
    corpus_size: int
    queries: dict[str, int]
    candidates: int


def split_sizes(n: int) -> dict[str, int]:
    """Target queries per split: 60% train, 10% dev, the rest (~30%) test."""
    sizes: dict[str, int] = {}
    for name, fraction in SPLIT_FRACTIONS:
        sizes[name] = round(n * fraction)
    sizes["test"] = n - sum(sizes.values())
    return sizes


def gzip_bytes(data: bytes) -> bytes:
    """Gzip ``data`` with no timestamp and no file name, so equal input gives equal bytes."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="", compresslevel=GZIP_LEVEL) as handle:
        handle.write(data)
    return buffer.getvalue()


def jsonl_bytes(records: Iterable[dict[str, str]]) -> bytes:
    """One JSON object per line, UTF-8, ``\\n`` line ends."""
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8")


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, so an interrupted build leaves no torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def sample_task(spec: TaskSpec, functions: Sequence[Function], *, per_task: int, seed: int) -> Sample:
    """Collect a task's pairs, keep ``per_task`` of them at random and draw its document numbering."""
    pairs = collect_pairs(functions, spec.make_pair)
    if not pairs:
        raise SystemExit(f"build_mini: no usable functions for task {spec.name}")
    candidates = len(pairs)
    # A per-task generator: tasks sample independently, and changing one task's
    # filters does not reshuffle the others.
    rng = random.Random(f"{seed}:{spec.name}")
    rng.shuffle(pairs)
    pairs = pairs[:per_task]
    # Query ids follow the shuffled order; document ids are a second, independent
    # permutation, so the number in a query id says nothing about its answer's.
    doc_numbers = list(range(len(pairs)))
    rng.shuffle(doc_numbers)
    return Sample(spec=spec, pairs=pairs, doc_numbers=doc_numbers, candidates=candidates)


def write_task(sample: Sample, split_of_function: Callable[[int], str], out: Path) -> BuiltTask:
    """Assign ids and write one task folder; each pair goes to its function's split."""
    spec, pairs = sample.spec, sample.pairs
    n = len(pairs)
    width = max(6, len(str(n - 1)))
    query_ids = [f"{spec.prefix}-q{i:0{width}d}" for i in range(n)]
    doc_ids = [f"{spec.prefix}-d{sample.doc_numbers[i]:0{width}d}" for i in range(n)]
    split_of = [split_of_function(index) for index, _ in pairs]
    sizes = {name: split_of.count(name) for name in SPLITS}

    task_dir = out / spec.name
    # Files are sorted by id so their order carries no information either.
    corpus = sorted(
        ({"_id": doc_ids[i], "title": "", "text": pairs[i][1].document} for i in range(n)),
        key=lambda record: record["_id"],
    )
    queries = [{"_id": query_ids[i], "text": pairs[i][1].query} for i in range(n)]
    write_bytes(task_dir / "corpus.jsonl.gz", gzip_bytes(jsonl_bytes(corpus)))
    write_bytes(task_dir / "queries.jsonl.gz", gzip_bytes(jsonl_bytes(queries)))
    for name in SPLITS:
        rows = ["query-id\tcorpus-id\tscore\n"]
        rows += [f"{query_ids[i]}\t{doc_ids[i]}\t1\n" for i in range(n) if split_of[i] == name]
        write_bytes(task_dir / "qrels" / f"{name}.tsv", "".join(rows).encode("utf-8"))
    return BuiltTask(spec=spec, corpus_size=n, queries=sizes, candidates=sample.candidates)


# ---------------------------------------------------------------------------
# benchmark.json and README.md
# ---------------------------------------------------------------------------


def python_version() -> str:
    """``major.minor.micro`` of the running interpreter, e.g. ``3.11.7``."""
    return platform.python_version()


def benchmark_definition(built: Sequence[BuiltTask], *, seed: int) -> dict:
    """The benchmark.json object (validated against grader/schemas/benchmark.schema.json)."""
    version = python_version()
    task_info = {}
    for task in built:
        task_info[task.spec.name] = {
            "kind": task.spec.kind,
            "description": task.spec.description,
            "language": "python",
            "corpus_size": task.corpus_size,
            "queries": dict(task.queries),
            "relevant_per_query": 1,
            "usable_pairs": task.candidates,
            "source": f"CPython {version} standard library (Lib/*.py)",
            "python_version": version,
            "license": "PSF-2.0",
            "seed": seed,
            "split_unit": "function group, shared by all tasks",
        }
    return {
        "name": "mini",
        "version": BENCHMARK_VERSION,
        "description": (
            "A small code-retrieval benchmark in BEIR layout, built from the functions and methods of "
            f"the CPython {version} standard library: docstring summary to code, first half of a "
            "function to its second half, and code to docstring. Bundled for tests and demos."
        ),
        "primary_measure": "NDCG@10",
        "default_split": "test",
        "tasks": [task.spec.name for task in built],
        "task_info": task_info,
    }


def validate_definition(definition: dict) -> None:
    """Check ``definition`` against the repository's schema (jsonschema is a grader dependency)."""
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.validate(definition, schema)


def readme_text(built: Sequence[BuiltTask], *, seed: int, per_task: int) -> str:
    """README.md of the benchmark folder: tasks, counts, provenance, rebuild command, licence."""
    rows = "\n".join(
        f"| `{t.spec.name}` | {t.spec.kind} | {t.corpus_size:,} | {t.queries['train']:,} | "
        f"{t.queries['dev']:,} | {t.queries['test']:,} | {t.candidates:,} |"
        for t in built
    )
    tasks = "\n".join(f"- **`{t.spec.name}`** ({t.spec.kind}). {t.spec.description}" for t in built)
    # sys.version verbatim (a code span keeps its spacing); only a line break,
    # which some builds have, would break the Markdown.
    exact_version = sys.version.replace("\n", " ")
    if all(t.queries == split_sizes(t.corpus_size) for t in built):
        exactness = "here every task's counts are exact"
    else:
        exactness = "here some counts are off by a few"
    return f"""# mini — a small code-retrieval benchmark from the Python standard library

`mini` is bundled with the grader for tests, demos and smoke runs. It follows
BEIR's layout (like CoIR): each task folder has `corpus.jsonl.gz`
(`_id`, `title`, `text`), `queries.jsonl.gz` (`_id`, `text`) and
`qrels/{{train,dev,test}}.tsv` (`query-id<TAB>corpus-id<TAB>score`).

Primary measure: NDCG@10; default split: `test`.

## Tasks

{tasks}

Every query has exactly one relevant document (score 1). The corpus of a task
holds the documents of **all** its splits, so a query is ranked against the
whole corpus. Titles are empty (a function name would give the answer away),
and document ids are an independent random permutation, so ids carry no hint.

| task | kind | corpus | train | dev | test | usable functions |
|------|------|-------:|------:|----:|-----:|-----------------:|
{rows}

"Usable functions" is the number of distinct query/document pairs that passed
the filters; at most {per_task:,} of them per task were kept, chosen at random
with a fixed seed.

## How it was built

Source: the `.py` files of the standard library of the interpreter that ran the
build (`sysconfig.get_paths()["stdlib"]`), skipping `site-packages` and the
`test`, `tests`, `idlelib` and `lib2to3` folders and files that fail to parse.
Module-level functions and methods of module-level classes (including those
under module- or class-level `if`/`try`/`with` blocks and of nested classes;
not functions nested in functions) are cut out with `ast.get_source_segment`
(decorators excluded); methods are dedented.

Filters: docstring summary of at least {MIN_SUMMARY_WORDS} words (text2code,
code2text); at least {MIN_BODY_LINES} non-blank body lines, {MIN_CODE2CODE_BODY_LINES}
for code2code; queries and documents at most {MAX_CHARS:,} characters;
duplicates (same text after case-folding and collapsing whitespace) among the
queries or among the documents of a task are dropped. Random seed: {seed}.

Splits are assigned to functions, not to pairs: a function is in the same
split in every task it appears in, so no train query or document of any task
comes from a function that is dev or test in another. Functions that share a
text are one unit (a *group*): same code, docstring or summary, or a text that
one of them shows (code, code2code half, docstring, summary; at least
{MIN_SUMMARY_WORDS} words) lying inside the code or docstring of the other,
after case-folding and collapsing whitespace. That covers copies of a function
in two modules, and deduplication keeping a different copy in different tasks.
Groups are visited in a random order (seeded) and each is put where its tasks'
splits most lack queries; moves and swaps of single groups then bring each
task's counts to 60% train, 10% dev and 30% test of its queries, rounded (or
as near as whole groups allow; {exactness}).
This is version {BENCHMARK_VERSION} of `mini`; version 1 split each task on its
own, which put many dev and test functions in another task's train split, so
scores on the two versions are not comparable.

- Python: `{exact_version}` (version {python_version()})
- Platform: `{platform.platform()}`

Rebuild with:

```
python scripts/build_mini.py
```

The build is deterministic: running it again with the same Python gives
byte-identical files. **Rebuilding with a different Python version gives
different data** (its standard library differs), so the ids, texts and
counts above hold only for the version named here.

## Licence

The queries and documents are derived from the source code and docstrings of
CPython's standard library, which is distributed under the PSF License
Agreement (Python Software Foundation License Version 2, PSF-2.0); see
https://docs.python.org/3/license.html for the licence text and the PSF's
copyright notice (Copyright © Python Software Foundation; All Rights Reserved).
The section "How it was built" above summarises the changes made to the
original texts, as the licence asks of derived works.
"""


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def build(out: Path, stdlib: Path, *, per_task: int = DEFAULT_PER_TASK, seed: int = SEED) -> list[BuiltTask]:
    """Build all tasks from ``stdlib`` into ``out`` and write benchmark.json and README.md."""
    if not stdlib.is_dir():
        raise SystemExit(f"build_mini: standard library folder not found: {stdlib}")
    # Materialise once: every task reads the same functions, in the same order.
    functions = list(iter_functions(stdlib))
    samples = [sample_task(spec, functions, per_task=per_task, seed=seed) for spec in TASKS]
    groups = function_groups(functions)
    split_of_group = assign_splits(groups, samples, seed=seed)
    built = [write_task(sample, lambda index: split_of_group[groups[index]], out) for sample in samples]
    definition = benchmark_definition(built, seed=seed)
    validate_definition(definition)
    write_bytes(out / "benchmark.json", (json.dumps(definition, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    write_bytes(out / "README.md", readme_text(built, seed=seed, per_task=per_task).encode("utf-8"))
    return built


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument(
        "--stdlib",
        type=Path,
        default=Path(sysconfig.get_paths()["stdlib"]),
        help="folder of .py sources to read (default: this interpreter's standard library)",
    )
    parser.add_argument("--per-task", type=int, default=DEFAULT_PER_TASK, help="queries (= documents) per task")
    parser.add_argument("--seed", type=int, default=SEED, help="random seed (part of the benchmark's definition)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.per_task < 1:
        raise SystemExit("build_mini: --per-task must be at least 1")
    built = build(args.out, args.stdlib, per_task=args.per_task, seed=args.seed)
    for task in built:
        counts = ", ".join(f"{name} {task.queries[name]}" for name in SPLITS)
        print(f"{task.spec.name}: corpus {task.corpus_size} ({task.candidates} usable); queries {counts}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
