"""A synthetic benchmark with the shape of all of CoIR: its ten tasks, 20 corpora, 2.39 M documents; not CoIR.

    .venv/bin/python bench/coir_shape_data.py OUT [--scale 1.0] [--seed 0]

Writes OUT/benchmark.json (name ``coir-shape-synthetic``: never to be mistaken for CoIR, whose data is not
here) and 20 task folders in BEIR's layout as the bundled `mini` (corpus.jsonl.gz, queries.jsonl.gz,
qrels/test.tsv, qrels/dev.tsv), with the groups of the bundled `coir` benchmark: CodeSearchNet and
CodeSearchNet-CCR are six per-language corpora each (go, java, javascript, php, python, ruby).

**Counts.** Each task's documents and queries are CoIR's test-split sizes as the bundled description records
them (``grader/bundled/coir/benchmark.json``, ``task_info.<task>.sizes``: MTEB's task statistics, 2,390,832
documents and 162,441 queries in all; docs/scale.md), times ``--scale`` (rounded, at least two each; at most
as many queries as documents). The first tenth of a task's queries is the public ``dev`` split, the rest the
hidden ``test`` split; each query has one relevant document.

**Lengths** (characters) are log-normal with the spread of ``bench/synthetic_corpus.py`` (sigma 0.614) around
a mean per task and side, clipped to [mean / 6, mean x 8]. APPS's means are MTEB's descriptive statistics
(documents 717, queries 1,341 characters; see synthetic_corpus.py); the other tasks' means are this
generator's estimates from the kind of text each task holds (CoIR's paper, Table 1: docstrings, functions,
SQL, StackOverflow posts, multi-turn dialogues), not measured figures: ``MEANS`` below names them.

**Texts** are built from small seed snippets, one set per CodeSearchNet language (a function header, body
lines, a closing line), one of SQL and one of English sentences, filled with identifiers from
``synthetic_corpus.vocabulary``. Each query is made of its relevant document's identifiers in the query's own
style (code, text or SQL), so a lexical encoder ranks it high and a grade is not all ties.

**Streaming**: documents are written as they are made; what is kept is one task's relevant documents'
identifiers (at most its query count). The folder is written as OUT.partial and renamed to OUT at the end,
so OUT is never half-written. The output is a function of (scale, seed) alone, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NAME = "coir-shape-synthetic"
COIR = REPO / "grader" / "bundled" / "coir" / "benchmark.json"
LANGUAGES = ("go", "java", "javascript", "php", "python", "ruby")
SIGMA = 0.614  # bench/synthetic_corpus.py: solved from APPS's mean and maximum

if str(REPO / "bench") not in sys.path:  # bench/ is not a package: its scripts import each other by name (last: never shadowing)
    sys.path.append(str(REPO / "bench"))
from synthetic_corpus import vocabulary, write_jsonl_gz  # noqa: E402

# Seed snippets: (header, body lines, closing line) per language; {f} a function name, {a}-{d} identifiers, {n} a number.
CODE_SEEDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "python": (
        "def {f}({a}, {b}):",
        ("    {a} = {b}({c}, {n})", "    if {a} is not None:", "        return {a}.{b}({c})", "    for {a} in {b}:", "        {a}.{b} = {c} + {n}"),
        "    return {a}",
    ),
    "go": (
        "func {f}({a} int, {b} string) error {{",
        (
            "\t{a} := {b}({c}, {n})",
            "\tif {a} != nil {{\n\t\treturn {b}\n\t}}",
            "\tfor _, {a} := range {b} {{\n\t\t{c}({d}, {n})\n\t}}",
            "\t{a}.{b} = {c} + {n}",
        ),
        "\treturn nil\n}}",
    ),
    "java": (
        "public static {a} {f}({b} {c}, int {d}) {{",
        (
            "    {a} {b} = new {c}({d}, {n});",
            "    if ({a} == null) {{ throw new {b}Exception({c}); }}",
            "    for ({a} {b} : {c}) {{ {d}.add({b}); }}",
            "    this.{a} = {b}.{c}({n});",
        ),
        "    return {a};\n}}",
    ),
    "javascript": (
        "function {f}({a}, {b}) {{",
        ("  const {a} = {b}({c}, {n});", "  if (!{a}) {{ return {b}; }}", "  {a}.forEach(({b}) => {c}.push({n}));", "  this.{a} = {b}.{c} || {n};"),
        "  return {a};\n}}",
    ),
    "php": (
        "public function {f}(${a}, ${b})\n{{",
        (
            "    ${a} = ${b}->{c}(${d}, {n});",
            "    if (empty(${a})) {{ return ${b}; }}",
            "    foreach (${a} as ${b}) {{ ${c}[{n}] = ${d}; }}",
            "    $this->{a} = ${b} . ${c};",
        ),
        "    return ${a};\n}}",
    ),
    "ruby": (
        "def {f}({a}, {b})",
        ("  {a} = {b}.{c}({n})", "  return {a} if {b}.nil?", "  {a}.each do |{b}|\n    {c} << {n}\n  end", "  @{a} = {b} + {c}"),
        "  {a}\nend",
    ),
}
SQL_SEED = (
    "SELECT {a}, {b} FROM {c} WHERE {d} = {n}",
    "JOIN {a} ON {b}.{c} = {a}.{d}",
    "GROUP BY {a} HAVING COUNT({b}) > 1",
    "ORDER BY {a} DESC",
    "SELECT SUM({a}) FROM {b} WHERE {c} > {n}",
)
TEXT_SEED = (
    "Returns the {a} of the given {b}.",
    "If {a} is empty, the {b} is used instead of {c}.",
    "How do I convert {a} to {b} with {c}?",
    "The {a} parameter sets how many {b} are read from {d}.",
    "Raises an error when {a} and {b} differ.",
    "I tried {a} but {b} keeps returning {c}.",
)


@dataclass(frozen=True)
class Style:
    """How a side (documents or queries) of a task is written: code of a language, English text, SQL, or text mixed with code."""

    kind: str  # "code", "text", "sql", "mixed"
    language: str = "python"
    mean_chars: float = 500.0


# (document style, query style) per CoIR task; code-to-text: CodeSearchNet's queries are code, its documents docstrings.
# Means in characters: APPS's from MTEB's statistics; the others this generator's estimates (module docstring).
MEANS: dict[str, tuple[str, Style, Style]] = {
    "apps": ("text-to-code", Style("code", "python", 717.27), Style("text", mean_chars=1340.96)),
    "cosqa": ("text-to-code", Style("code", "python", 300), Style("text", mean_chars=40)),
    "synthetic-text2sql": ("text-to-code", Style("sql", mean_chars=130), Style("text", mean_chars=85)),
    **{f"CodeSearchNet-{lang}": ("code-to-text", Style("text", mean_chars=160), Style("code", lang, 600)) for lang in LANGUAGES},
    **{f"CodeSearchNet-ccr-{lang}": ("code-to-code", Style("code", lang, 350), Style("code", lang, 350)) for lang in LANGUAGES},
    "codetrans-dl": ("code-to-code", Style("code", "python", 1600), Style("code", "python", 1600)),
    "codetrans-contest": ("code-to-code", Style("code", "java", 1100), Style("code", "python", 1000)),
    "stackoverflow-qa": ("hybrid", Style("mixed", "python", 1200), Style("mixed", "python", 1500)),
    "codefeedback-st": ("hybrid", Style("mixed", "python", 1400), Style("mixed", "python", 700)),
    "codefeedback-mt": ("hybrid", Style("mixed", "python", 1400), Style("mixed", "python", 4000)),
}


def coir_sizes() -> tuple[list[str], dict[str, list[str]], dict[str, tuple[int, int]]]:
    """CoIR's task names, groups and (documents, queries) per task, from the bundled description."""
    spec = json.loads(COIR.read_text(encoding="utf-8"))
    sizes = {task: (int(spec["task_info"][task]["sizes"]["corpus"]), int(spec["task_info"][task]["sizes"]["queries"])) for task in spec["tasks"]}
    return list(spec["tasks"]), dict(spec["groups"]), sizes


def scaled(documents: int, queries: int, scale: float) -> tuple[int, int]:
    """A task's counts at ``scale``: rounded, at least two of each (one public and one hidden query), no more queries than documents."""
    docs = max(2, round(documents * scale))
    return docs, min(docs, max(2, round(queries * scale)))


def lengths(style: Style) -> tuple[float, int, int]:
    """(mu, low, high) of a style's log-normal length in characters."""
    return math.log(style.mean_chars) - SIGMA * SIGMA / 2, max(8, int(style.mean_chars / 6)), int(style.mean_chars * 8)


def draw_length(rng: random.Random, style: Style) -> int:
    """A length in characters for one text of ``style``."""
    mu, low, high = lengths(style)
    return min(high, max(low, int(rng.lognormvariate(mu, SIGMA))))


def _fill(template: str, names: list[str], rng: random.Random) -> str:
    a, b, c, d = rng.choices(names, k=4)
    # {n}: a literal number, which keeps code from being one template under renamed identifiers (as `grader lint` sees code)
    return template.format(f=names[0], a=a, b=b, c=c, d=d, n=rng.randrange(100_000))


def write_text(rng: random.Random, style: Style, names: list[str], target: int) -> str:
    """A text of about ``target`` characters in ``style`` over ``names`` (the first is a function's name in code)."""
    parts: list[str] = []
    size = 0
    kind = style.kind
    if kind == "mixed":  # a post or a dialogue turn: prose, then a code block, then prose again
        prose = write_text(rng, Style("text"), names, max(8, target // 2))
        code = write_text(rng, Style("code", style.language), names, max(8, target - len(prose)))
        return f"{prose}\n```{style.language}\n{code}\n```"
    if kind == "code":
        header, body, closing = CODE_SEEDS[style.language]
        parts.append(_fill(header, names, rng))
        size = len(parts[0])
        while size < target:
            line = _fill(rng.choice(body), names, rng)
            parts.append(line)
            size += len(line) + 1
        parts.append(_fill(closing, names, rng))
        return "\n".join(parts)
    seeds = SQL_SEED if kind == "sql" else TEXT_SEED
    while size < target:
        line = _fill(rng.choice(seeds), names, rng)
        parts.append(line)
        size += len(line) + 1
    return (" " if kind == "text" else "\n").join(parts)


def code_language(*styles: Style) -> str:
    """The language of a task's code: its first side's that holds code, else ``sql`` (text-to-SQL)."""
    return next((style.language for style in styles if style.kind in ("code", "mixed")), "sql")


def generate_task(folder: Path, task: str, documents: int, queries: int, seed: int, words: list[str]) -> dict:
    """Write one task's folder (corpus streamed) and return its task_info entry."""
    kind, doc_style, query_style = MEANS[task]
    rng = random.Random(f"{seed}:{task}")  # a str seed is hashed (sha512): stable across runs and platforms
    (folder / "qrels").mkdir(parents=True)
    relevant = rng.sample(range(documents), queries)  # the document each query is about
    wanted = {doc: q for q, doc in enumerate(relevant)}
    names_of: dict[int, list[str]] = {}
    total = 0
    with write_jsonl_gz(folder / "corpus.jsonl.gz") as corpus:
        for index in range(documents):
            names = rng.choices(words, k=6)
            text = write_text(rng, doc_style, names, draw_length(rng, doc_style))
            total += len(text)
            if index in wanted:
                names_of[wanted[index]] = [name for name in names if name in text]
            corpus.write((json.dumps({"_id": f"d{index:07d}", "title": "", "text": text}) + "\n").encode())
    query_total = 0
    with write_jsonl_gz(folder / "queries.jsonl.gz") as stream:
        for q in range(queries):
            text = write_text(rng, query_style, names_of[q], draw_length(rng, query_style))
            query_total += len(text)
            stream.write((json.dumps({"_id": f"q{q:06d}", "text": text}) + "\n").encode())
    dev = max(1, queries // 10)  # the first tenth is the public sample split, the rest hidden
    for split, members in (("dev", range(dev)), ("test", range(dev, queries))):
        rows = "".join(f"q{q:06d}\td{relevant[q]:07d}\t1\n" for q in members)
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return {
        "kind": kind,
        "language": code_language(doc_style, query_style),
        "corpus_size": documents,
        "queries": queries,
        "mean_chars": {"documents": round(total / documents, 1), "queries": round(query_total / queries, 1)},
        "styles": {"documents": doc_style.kind, "queries": query_style.kind},
    }


def generate(out: Path, scale: float = 1.0, seed: int = 0) -> Path:
    """Write the benchmark folder ``out`` (which must not exist) at ``scale`` of CoIR's counts; return it."""
    if not 0 < scale <= 1:
        raise ValueError(f"--scale must be in (0, 1], not {scale}")
    if out.exists():
        raise ValueError(f"{out} exists already: choose a new folder")
    tasks, groups, sizes = coir_sizes()
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a run that died before its rename
    words = vocabulary(np.random.default_rng(seed))
    info = {}
    for task in tasks:
        documents, queries = scaled(*sizes[task], scale)
        info[task] = generate_task(partial / task, task, documents, queries, seed, words)
    spec = {
        "name": NAME,
        "version": f"1-scale{scale:g}-seed{seed}",
        "description": (
            "Synthetic texts with the shape of CoIR's ten tasks (counts from grader/bundled/coir/benchmark.json times the scale): "
            "NOT CoIR's data. Generated by bench/coir_shape_data.py."
        ),
        "primary_measure": "NDCG@10",
        "default_split": "test",
        "sample_split": "dev",
        "tasks": tasks,
        "groups": groups,
        "task_info": info,
    }
    (partial / "benchmark.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    partial.rename(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of CoIR's counts (default 1: 2.39 M documents)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        generate(args.out, args.scale, args.seed)
    except ValueError as error:
        raise SystemExit(f"coir_shape_data: {error}") from None
    spec = json.loads((args.out / "benchmark.json").read_text(encoding="utf-8"))
    documents = sum(entry["corpus_size"] for entry in spec["task_info"].values())
    queries = sum(entry["queries"] for entry in spec["task_info"].values())
    print(f"{args.out}: {len(spec['tasks'])} tasks, {documents:,} documents, {queries:,} queries in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
