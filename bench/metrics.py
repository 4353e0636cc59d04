"""Benchmark: scoring a CodeSearchNet-sized run, grader versus BEIR's path and ranx.

Not a test: timings live here, never in ``tests/``. Run from the repository root::

    .venv/bin/python bench/metrics.py                   # 53,000 queries x 1,000 documents
    .venv/bin/python bench/metrics.py --queries 2000    # a smoke run

It generates (once per size and seed, cached in ``--workdir``) a TREC run, the same
run as BEIR JSON ``{qid: {docid: score}}``, and qrels (BEIR TSV, plus TREC for
ranx), then measures each contender in its own fresh process, so peak RSS
(``ru_maxrss`` of that process, from ``os.wait4``) belongs to it alone:

  (a) BEIR: ``json.load`` the run, ``pytrec_eval.RelevanceEvaluator(...).evaluate``,
      then averaging as ``beir.retrieval.evaluation.EvaluateRetrieval.evaluate`` does;
  (b) ranx: ``Qrels.from_file`` / ``Run.from_file`` (TREC) and ``ranx.evaluate``,
      called twice: the first call JIT-compiles with numba (or loads numba's
      on-disk cache from an earlier run), the second is warm;
  (c) ``grader score ... --format json`` end to end, Python start-up included;
  (d) the in-memory scoring step alone: ``grader.metrics.policy.evaluate`` on a
      built :class:`~grader.runs.run.Run` versus ``RelevanceEvaluator.evaluate`` on
      a loaded dict; ``Run.build`` from arrays (where we sort, once) is reported
      separately.

It checks that (a), (b) and (c) agree on NDCG@10 to 1e-9 and prints, then writes
as Markdown, a table of wall time and peak RSS per contender with their ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_QUERIES = 53_000
DEFAULT_DEPTH = 1_000
DEFAULT_CORPUS = 1_000_000
CUTOFFS = (1, 3, 5, 10, 100, 1000)
FAMILIES = ("NDCG", "MAP", "Recall", "P")
MEASURES = tuple(f"{family}@{k}" for family in FAMILIES for k in CUTOFFS)
TOLERANCE = 1e-9
# Bump when the generated data change, so cached files are rebuilt.
GENERATOR_VERSION = 2
# Absolute targets of (c), whatever (a) takes (issue 38): on the 2-core development machine.
CLI_WALL_TARGET_S = 7.5
CLI_RSS_TARGET_MIB = 850.0
# Share of queries whose relevant document is not retrieved at all.
ABSENT_SHARE = 0.1


# --- data -------------------------------------------------------------------


@dataclass(frozen=True)
class Files:
    """The generated inputs of one size and seed."""

    folder: Path

    @property
    def run_trec(self) -> Path:
        return self.folder / "run.trec"

    @property
    def run_json(self) -> Path:
        return self.folder / "run.json"

    @property
    def qrels_tsv(self) -> Path:
        return self.folder / "qrels.tsv"

    @property
    def qrels_trec(self) -> Path:
        return self.folder / "qrels.trec"

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.json"


def _largest_prime_at_most(n: int) -> int:
    def is_prime(m: int) -> bool:
        return m >= 2 and all(m % d for d in range(2, math.isqrt(m) + 1))

    while not is_prime(n):
        n -= 1
    return n


def generate(files: Files, *, queries: int, depth: int, corpus: int, seed: int) -> bool:
    """Write the run (TREC and JSON) and qrels (BEIR TSV and TREC) unless cached; True if written.

    Each query ranks ``depth`` distinct documents ``shuffle[(a + j*b) mod p]`` for a
    prime corpus size ``p``, a fixed random permutation ``shuffle`` and random ``a``,
    ``b`` (distinct because ``p`` is prime and ``depth < p``). Scores are uniform in [0.2, 0.9) rounded to 4 decimals, so about
    7% of neighbours tie; lines are written score-descending as a retriever writes
    them, ties in generation order (arbitrary with respect to doc ids). One
    document per query is relevant: one of those ranked, at a uniformly random
    rank, or, for ``ABSENT_SHARE`` of the queries, one not retrieved.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = {"version": GENERATOR_VERSION, "queries": queries, "depth": depth, "corpus": corpus, "seed": seed}
    paths = (files.run_trec, files.run_json, files.qrels_tsv, files.qrels_trec)
    if files.manifest.is_file() and json.loads(files.manifest.read_text()) == wanted and all(p.is_file() for p in paths):
        return False
    files.folder.mkdir(parents=True, exist_ok=True)
    files.manifest.unlink(missing_ok=True)
    prime = _largest_prime_at_most(corpus)
    if depth >= prime:
        raise SystemExit(f"--depth must be below the corpus size ({prime})")
    rng = np.random.default_rng(seed)
    # A fixed shuffle of the corpus, so ids along a ranking are not an arithmetic progression.
    shuffle = rng.permutation(prime)
    query_ids = [f"q{i}" for i in range(queries)]
    chunk = max(1, 2_000_000 // depth)  # queries per batch: ~2M lines, a few hundred MB
    relevant: list[str] = []

    def strings_of(array: Any) -> Any:
        return pc.cast(pa.array(array), pa.string())

    def write_values(handle: Any, strings: Any) -> None:
        # The values buffer of a string array is its strings back to back, which is
        # the file text when every value carries its own separator.
        offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset : strings.offset + len(strings) + 1]
        handle.write(memoryview(strings.buffers()[2])[offsets[0] : offsets[-1]])

    with open(files.run_trec, "wb") as trec, open(files.run_json, "wb") as beir:
        beir.write(b"{")
        for first in range(0, queries, chunk):
            n = min(chunk, queries - first)
            a = rng.integers(0, prime, size=n, dtype=np.int64)
            b = rng.integers(1, prime, size=n, dtype=np.int64)
            docs = shuffle[(a[:, None] + np.arange(depth, dtype=np.int64)[None, :] * b[:, None]) % prime]
            scores = -np.sort(-np.round(rng.uniform(0.2, 0.9, size=(n, depth)), 4), axis=1)
            rank = rng.integers(0, depth, size=n)
            absent = rng.random(n) < ABSENT_SHARE
            chosen = np.where(absent, shuffle[(a + depth * b) % prime], docs[np.arange(n), rank])
            relevant.extend(f"doc{d}" for d in chosen.tolist())

            doc_text = pc.binary_join_element_wise("doc", strings_of(docs.ravel()), "")
            score_text = strings_of(scores.ravel())
            qid_text = pc.take(pa.array(query_ids[first : first + n]), pa.array(np.repeat(np.arange(n), depth)))
            rank_text = strings_of(np.tile(np.arange(1, depth + 1), n))
            write_values(trec, pc.binary_join_element_wise(qid_text, "Q0", doc_text, rank_text, score_text, "bench\n", " "))

            last = np.zeros(n * depth, dtype=bool)
            last[depth - 1 :: depth] = True
            entries = pc.binary_join_element_wise('"', doc_text, '": ', score_text, pc.if_else(pa.array(last), "}", ", "), "")
            for i in range(n):
                q = first + i
                beir.write(((", " if q else "") + json.dumps(query_ids[q]) + ": {").encode())
                write_values(beir, entries.slice(i * depth, depth))
        beir.write(b"}\n")

    with open(files.qrels_tsv, "w", encoding="utf-8") as tsv:
        tsv.write("query-id\tcorpus-id\tscore\n")
        tsv.writelines(f"{q}\t{d}\t1\n" for q, d in zip(query_ids, relevant))
    with open(files.qrels_trec, "w", encoding="utf-8") as trec_qrels:
        trec_qrels.writelines(f"{q} 0 {d} 1\n" for q, d in zip(query_ids, relevant))
    files.manifest.write_text(json.dumps(wanted) + "\n")
    return True


# --- contenders (each runs in a child process) -------------------------------


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _load_beir_qrels(path: Path) -> dict[str, dict[str, int]]:
    """As ``beir.datasets.data_loader.GenericDataLoader._load_qrels``."""
    import csv

    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        next(reader)
        for query_id, corpus_id, score in reader:
            qrels.setdefault(query_id, {})[corpus_id] = int(score)
    return qrels


def _pytrec_measures() -> set[str]:
    ks = ",".join(str(k) for k in CUTOFFS)
    return {f"map_cut.{ks}", f"ndcg_cut.{ks}", f"recall.{ks}", f"P.{ks}"}


def _beir_means(scores: dict[str, dict[str, float]]) -> dict[str, float]:
    """Averages as BEIR's ``EvaluateRetrieval.evaluate`` (sum in query order, / #queries), unrounded."""
    names = {"NDCG": "ndcg_cut_{}", "MAP": "map_cut_{}", "Recall": "recall_{}", "P": "P_{}"}
    sums = dict.fromkeys(MEASURES, 0.0)
    for per_query in scores.values():
        for family in FAMILIES:
            for k in CUTOFFS:
                sums[f"{family}@{k}"] += per_query[names[family].format(k)]
    return {name: total / len(scores) for name, total in sums.items()}


class _Clock:
    """Named wall-clock steps."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}

    def time(self, name: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = function(*args, **kwargs)
        self.steps[name] = time.perf_counter() - started
        return result


def child_beir(files: Files, repeat: int) -> dict[str, Any]:
    """(a) BEIR's path, from files to means."""
    import pytrec_eval

    clock = _Clock()
    qrels = clock.time("load qrels (csv)", _load_beir_qrels, files.qrels_tsv)

    def load_run() -> Any:
        with open(files.run_json, encoding="utf-8") as handle:
            return json.load(handle)

    results = clock.time("json.load run", load_run)
    evaluator = clock.time("RelevanceEvaluator()", pytrec_eval.RelevanceEvaluator, qrels, _pytrec_measures())
    scores = clock.time("evaluate", evaluator.evaluate, results)
    means = clock.time("average", _beir_means, scores)
    return {"steps": clock.steps, "work_s": sum(clock.steps.values()), "means": means, "peak_rss_mib": _peak_rss_mib()}


def child_ranx(files: Files, repeat: int) -> dict[str, Any]:
    """(b) ranx from TREC files; evaluate twice (JIT, then warm)."""
    import numpy as np
    import ranx

    clock = _Clock()
    qrels = clock.time("Qrels.from_file", ranx.Qrels.from_file, str(files.qrels_trec), kind="trec")
    run = clock.time("Run.from_file", ranx.Run.from_file, str(files.run_trec), kind="trec")
    metrics = [f"{name}@{k}" for name in ("ndcg", "map", "recall", "precision") for k in CUTOFFS]
    clock.time("evaluate (1st: JIT)", ranx.evaluate, qrels, run, metrics)
    values = clock.time("evaluate (2nd: warm)", ranx.evaluate, qrels, run, metrics)
    ranx_to_ours = {"ndcg": "NDCG", "map": "MAP", "recall": "Recall", "precision": "P"}
    means = {}
    for metric, value in values.items():
        name, k = metric.split("@")
        means[f"{ranx_to_ours[name]}@{k}"] = float(np.float64(value))
    work = sum(v for k, v in clock.steps.items() if "2nd" not in k)
    warm = sum(v for k, v in clock.steps.items() if "1st" not in k)
    return {"steps": clock.steps, "work_s": work, "warm_work_s": warm, "means": means, "peak_rss_mib": _peak_rss_mib()}


def _best(repeat: int, function: Any, *args: Any) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls, and the last result."""
    best, result = math.inf, None
    for _ in range(repeat):
        started = time.perf_counter()
        result = function(*args)
        best = min(best, time.perf_counter() - started)
    return best, result


def child_engine(files: Files, repeat: int) -> dict[str, Any]:
    """(d, ours) Run.build from arrays, then evaluate on the built Run; best of ``repeat``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    from grader.data.qrels import read_qrels
    from grader.metrics.measures import parse_measures
    from grader.metrics.policy import Policy, evaluate
    from grader.runs.run import Run

    # Arrays as a reader hands them to Run.build: file order (not yet trec order),
    # query-grouped CSR, doc codes into a vocabulary of first appearance.
    table = pacsv.read_csv(
        files.run_trec,
        read_options=pacsv.ReadOptions(column_names=["qid", "q0", "docid", "rank", "score", "tag"]),
        parse_options=pacsv.ParseOptions(delimiter=" "),
        convert_options=pacsv.ConvertOptions(
            include_columns=["qid", "docid", "score"], column_types={"qid": pa.string(), "docid": pa.string(), "score": pa.float64()}
        ),
    )
    queries = pc.dictionary_encode(table.column("qid")).combine_chunks()
    docs = pc.dictionary_encode(table.column("docid")).combine_chunks()
    query_ids = queries.dictionary.to_pylist()
    offsets = np.zeros(len(query_ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(queries.indices.to_numpy(zero_copy_only=False), minlength=len(query_ids)), out=offsets[1:])
    doc_codes = docs.indices.to_numpy(zero_copy_only=False)
    doc_vocab = docs.dictionary.to_pylist()
    scores = table.column("score").to_numpy()
    del table, queries, docs

    qrels = read_qrels(files.qrels_tsv)
    measures = parse_measures(list(MEASURES))
    build_s, run = _best(repeat, lambda: Run.build(query_ids, offsets, doc_codes, doc_vocab, scores))
    evaluate_s, means = _best(repeat, lambda: evaluate(qrels, run, measures, Policy.STRICT).means())
    steps = {"Run.build from arrays": build_s, "evaluate + means": evaluate_s}
    return {"steps": steps, "work_s": evaluate_s, "means": means, "peak_rss_mib": _peak_rss_mib()}


def child_pytrec(files: Files, repeat: int) -> dict[str, Any]:
    """(d, pytrec_eval) RelevanceEvaluator.evaluate on an already loaded dict; best of ``repeat``."""
    import pytrec_eval

    qrels = _load_beir_qrels(files.qrels_tsv)
    with open(files.run_json, encoding="utf-8") as handle:
        results = json.load(handle)
    construct_s, evaluator = _best(repeat, pytrec_eval.RelevanceEvaluator, qrels, _pytrec_measures())
    evaluate_s, scores = _best(repeat, evaluator.evaluate, results)
    steps = {"RelevanceEvaluator()": construct_s, "evaluate": evaluate_s}
    return {"steps": steps, "work_s": evaluate_s, "means": _beir_means(scores), "peak_rss_mib": _peak_rss_mib()}


CHILDREN = {"beir": child_beir, "ranx": child_ranx, "engine": child_engine, "pytrec": child_pytrec}


# --- parent -----------------------------------------------------------------


@dataclass
class Result:
    """One contender's measurements."""

    key: str
    label: str
    command: list[str]
    process_s: float = math.nan  # parent-measured: spawn to exit, start-up and imports included
    peak_rss_mib: float = math.nan  # ru_maxrss of the process, from os.wait4
    cpu_s: float = math.nan  # user + system CPU time of the process (all its threads)
    report: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    #: (wall s, CPU s, peak RSS MiB) of each round; process_s and cpu_s are their medians, peak_rss_mib their largest
    rounds: list[tuple[float, float, float]] = field(default_factory=list)

    @property
    def means(self) -> dict[str, float]:
        return self.report.get("means", {})


def run_measured(command: list[str]) -> tuple[float, float, float, str, str, int]:
    """Run ``command``; return (wall s, CPU s, peak RSS MiB, stdout, stderr, exit code) of that process alone."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=REPO)
        # wait4 gives the rusage of this one child (and its own reaped children),
        # unlike RUSAGE_CHILDREN, which keeps the maximum over all children so far.
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read().decode(), err.read().decode(), process.returncode


def measure(result: Result) -> Result:
    """Run ``result``'s command once more; its figures become the medians of its rounds so far (peak RSS: the largest)."""
    print(f"  running {result.label} (round {len(result.rounds) + 1}) ...", flush=True)
    wall, cpu, rss, stdout, stderr, code = run_measured(result.command)
    result.rounds.append((wall, cpu, rss))
    result.process_s = statistics.median(r[0] for r in result.rounds)
    result.cpu_s = statistics.median(r[1] for r in result.rounds)
    result.peak_rss_mib = max(r[2] for r in result.rounds)
    if code != 0:
        result.error = f"exit code {code}: {stderr.strip()[-2000:]}"
        print(f"    FAILED: {result.error}", flush=True)
        return result
    if result.key == "cli":
        result.report = {"means": json.loads(stdout)["measures"]}
    else:
        result.report = json.loads(stdout.strip().splitlines()[-1])
    print(f"    {wall:8.2f} s process ({cpu:.2f} s CPU), peak RSS {rss:8.0f} MiB", flush=True)
    for step, seconds in result.report.get("steps", {}).items():
        print(f"      {step:<28} {seconds:8.3f} s", flush=True)
    return result


def machine_facts() -> dict[str, str]:
    import numpy
    import pyarrow

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for module in ("pytrec_eval", "ranx", "numba"):
        try:
            from importlib.metadata import version

            versions[module] = version({"pytrec_eval": "pytrec-eval-terrier"}.get(module, module))
        except Exception:
            versions[module] = "not installed"
    memory = "unknown"
    try:
        kib = int(next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")).split()[1])
        memory = f"{kib / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    load = os.getloadavg()
    return {
        "load average (1, 5, 15 min) when the report was written": ", ".join(f"{x:.1f}" for x in load),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
        "pytrec_eval (pytrec-eval-terrier)": versions["pytrec_eval"],
        "ranx": versions["ranx"],
        "numba": versions["numba"],
    }


def _fmt_s(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}"


def _fmt_mib(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:,.0f}"


def _ratio(numerator: float, denominator: float) -> str:
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return "—"
    return f"{numerator / denominator:.1f}x"


def report(results: dict[str, Result], args: argparse.Namespace, command: str, facts: dict[str, str], sizes: dict[str, Any]) -> str:
    """The Markdown report (also printed)."""
    beir, ranx_, cli, engine, pytrec = (results.get(k) for k in ("beir", "ranx", "cli", "engine", "pytrec"))
    lines = [
        "# Scoring benchmark",
        "",
        f"{sizes['queries']:,} queries x {sizes['depth']:,} ranked documents ({sizes['entries']:,} run lines, "
        f"{sizes['trec_mib']:,.0f} MiB TREC / {sizes['json_mib']:,.0f} MiB JSON), one relevant document per query "
        f"(not retrieved for {ABSENT_SHARE:.0%}), corpus of {sizes['corpus']:,} doc ids, scores with 4 decimals (ties), "
        f"seed {args.seed}; {len(MEASURES)} measures (NDCG, MAP, Recall, P at {', '.join(map(str, CUTOFFS))}).",
        "",
        "Each contender runs in its own fresh process, one after another. *Process* is the wall time from spawn to exit "
        "(interpreter start-up and imports included); *CPU* is that process's user + system time (all threads); "
        "*work* is the time measured inside the process around the steps listed; *peak RSS* is that process's `ru_maxrss`. "
        "On a shared machine wall times move by tens of percent between runs; CPU times move less. "
        f"(a) and (c) run {args.rounds} times each, interleaved (a, c, a, c, ...), so that a busy moment of the machine "
        "falls on both: their process and CPU times are the medians, their peak RSS the largest of the rounds; "
        "the other contenders run once.",
        "",
        "## End to end, from files",
        "",
        "| contender | process (s) | CPU (s) | work (s) | peak RSS (MiB) | steps (s) |",
        "|---|---:|---:|---:|---:|---|",
    ]

    def row(result: Result | None, work: float) -> None:
        if result is None:
            return
        if result.error:
            lines.append(f"| {result.label} | failed | | | | {result.error.splitlines()[0][:120]} |")
            return
        steps = "; ".join(f"{k} {v:.2f}" for k, v in result.report.get("steps", {}).items())
        lines.append(
            f"| {result.label} | {_fmt_s(result.process_s)} | {_fmt_s(result.cpu_s)} | {_fmt_s(work)} | {_fmt_mib(result.peak_rss_mib)} | {steps} |"
        )

    for result in (beir, ranx_, cli):
        if result is not None:
            work = result.process_s if result.key == "cli" else result.report.get("work_s", math.nan)
            row(result, work)
    for result in (beir, cli):
        if result is not None and len(result.rounds) > 1:
            each = "; ".join(f"{w:.2f} s ({c:.2f} s CPU, {r:,.0f} MiB)" for w, c, r in result.rounds)
            lines += ["", f"{result.label}, each round: {each}."]
    if ranx_ is not None and not ranx_.error:
        lines.append("")
        lines.append(
            f"ranx work counts its first `evaluate` (numba JIT compile, or numba's on-disk cache when an earlier run compiled it); "
            f"with the warm second call instead: {_fmt_s(ranx_.report.get('warm_work_s', math.nan))} s."
        )
    lines += ["", "## Scoring step alone, in memory", "", "| step | best of | time (s) |", "|---|---:|---:|"]
    if engine is not None and not engine.error:
        lines.append(
            f"| grader `Run.build` from arrays (validate, sort into trec order once) | {args.repeat} | {engine.report['steps']['Run.build from arrays']:.3f} |"
        )
        lines.append(
            f"| grader `evaluate(qrels, run, measures)` + means, on the built Run | {args.repeat} | {engine.report['steps']['evaluate + means']:.3f} |"
        )
    if pytrec is not None and not pytrec.error:
        lines.append(f"| pytrec_eval `RelevanceEvaluator(qrels, measures)` | {args.repeat} | {pytrec.report['steps']['RelevanceEvaluator()']:.3f} |")
        lines.append(f"| pytrec_eval `evaluator.evaluate(run_dict)` on the loaded dict | {args.repeat} | {pytrec.report['steps']['evaluate']:.3f} |")

    lines += ["", "## Ratios and targets", "", "| ratio | value | target | met |", "|---|---:|---:|---|"]

    def target(name: str, value: float, goal: float, higher_is_better: bool = True) -> None:
        if math.isnan(value):
            lines.append(f"| {name} | — | {goal:g}x | — |")
            return
        met = value >= goal if higher_is_better else value <= goal
        lines.append(f"| {name} | {value:.2f}x | {'≥' if higher_is_better else '≤'} {goal:g}x | {'yes' if met else '**no**'} |")

    def ok(result: Result | None) -> bool:
        return result is not None and not result.error

    if ok(beir) and ok(cli):
        target("(a) BEIR work time / (c) grader CLI process time", beir.report["work_s"] / cli.process_s, 10.0)
        target("(a) BEIR process time / (c) grader CLI process time", beir.process_s / cli.process_s, 10.0)
        lines.append(f"| (a) BEIR process CPU / (c) grader CLI process CPU | {beir.cpu_s / cli.cpu_s:.2f}x | (no target) | |")
        target("(c) grader CLI peak RSS / (a) BEIR peak RSS", cli.peak_rss_mib / beir.peak_rss_mib, 0.15, higher_is_better=False)
    if ok(cli):
        met = cli.process_s <= CLI_WALL_TARGET_S
        lines.append(f"| (c) grader CLI process time, median (s) | {cli.process_s:.2f} | ≤ {CLI_WALL_TARGET_S:g} | {'yes' if met else '**no**'} |")
        met = cli.peak_rss_mib <= CLI_RSS_TARGET_MIB
        lines.append(f"| (c) grader CLI peak RSS (MiB) | {cli.peak_rss_mib:,.0f} | ≤ {CLI_RSS_TARGET_MIB:g} | {'yes' if met else '**no**'} |")
    if ok(engine) and ok(pytrec):
        target("(d) pytrec_eval evaluate / grader evaluate", pytrec.report["steps"]["evaluate"] / engine.report["steps"]["evaluate + means"], 20.0)
        build_and_eval = engine.report["steps"]["evaluate + means"] + engine.report["steps"]["Run.build from arrays"]
        lines.append(
            f"| (d') pytrec_eval evaluate / grader (Run.build + evaluate) | {pytrec.report['steps']['evaluate'] / build_and_eval:.2f}x | (no target) | |"
        )
    if ok(ranx_) and ok(cli):
        lines.append(f"| (b) ranx work time / (c) grader CLI process time | {ranx_.report['work_s'] / cli.process_s:.2f}x | (no target) | |")
        lines.append(f"| (c) grader CLI peak RSS / (b) ranx peak RSS | {cli.peak_rss_mib / ranx_.peak_rss_mib:.2f}x | (no target) | |")

    lines += [
        "",
        "## Agreement (NDCG@10, and the largest difference over all 24 measures)",
        "",
        "| contender | NDCG@10 | vs (c) | max diff, 24 measures |",
        "|---|---:|---:|---:|",
    ]
    reference = cli.means if ok(cli) else {}
    for result in (beir, ranx_, cli, engine, pytrec):
        if not ok(result):
            continue
        value = result.means.get("NDCG@10", math.nan)
        diffs = [abs(result.means[m] - reference[m]) for m in MEASURES if m in result.means and m in reference]
        diff = abs(value - reference.get("NDCG@10", math.nan))
        agrees = "agrees" if diff <= TOLERANCE else "**DISAGREES**"
        lines.append(f"| {result.label} | {value:.15f} | {diff:.1e} ({agrees}) | {max(diffs) if diffs else math.nan:.1e} |")
    if ok(ranx_) and reference and abs(ranx_.means.get("NDCG@10", math.nan) - reference.get("NDCG@10", math.nan)) > TOLERANCE:
        lines += [
            "",
            "ranx disagrees: it ranks score ties in its own order (numpy argsort of the negated scores), "
            "not trec_eval's (document id descending), so a relevant document inside a tie may land at another rank.",
        ]

    lines += ["", "## Machine", ""]
    lines += [f"- {name}: {value}" for name, value in facts.items()]
    lines += ["", "## Command", "", "```", command, "```", ""]
    return "\n".join(lines)


def _relative(path: str) -> str:
    """``path`` relative to the repository when inside it (for a copyable command line)."""
    absolute = Path(os.path.abspath(path))
    return str(absolute.relative_to(REPO)) if absolute.is_relative_to(REPO) else path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--queries", type=int, default=DEFAULT_QUERIES, help="number of queries")
    parser.add_argument("--depth", type=int, default=DEFAULT_DEPTH, help="ranked documents per query")
    parser.add_argument("--corpus", type=int, default=DEFAULT_CORPUS, help="about this many distinct doc ids (rounded down to a prime)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the generated data")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out", help="where generated files are cached (git-ignored)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of the in-memory steps (d); the best is kept")
    parser.add_argument("--rounds", type=int, default=3, help="runs of (a) and (c), interleaved; medians reported")
    parser.add_argument("--only", default="abcd", help="contenders to run, a subset of 'abcd'")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="write the Markdown table here (default: bench/results/metrics.md at the default sizes, WORKDIR/<size>/metrics.md otherwise, so a smoke run never overwrites the recorded results)",
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = Files(args.workdir.resolve() / f"q{args.queries}-d{args.depth}-c{args.corpus}-s{args.seed}")
    if args.child:
        print(json.dumps(CHILDREN[args.child](files, args.repeat)))
        return 0

    command = shlex.join([_relative(sys.executable), _relative(sys.argv[0]), *sys.argv[1:]])
    print(f"data in {files.folder}", flush=True)
    started = time.perf_counter()
    if generate(files, queries=args.queries, depth=args.depth, corpus=args.corpus, seed=args.seed):
        print(f"  generated in {time.perf_counter() - started:.1f} s", flush=True)
    else:
        print("  reusing the generated files (manifest matches)", flush=True)
    sizes = {
        "queries": args.queries,
        "depth": args.depth,
        "corpus": _largest_prime_at_most(args.corpus),
        "entries": args.queries * args.depth,
        "trec_mib": files.run_trec.stat().st_size / 2**20,
        "json_mib": files.run_json.stat().st_size / 2**20,
    }

    me = [sys.executable, str(Path(__file__).resolve())]
    common = [
        "--queries",
        str(args.queries),
        "--depth",
        str(args.depth),
        "--corpus",
        str(args.corpus),
        "--seed",
        str(args.seed),
        "--workdir",
        str(args.workdir.resolve()),
        "--repeat",
        str(args.repeat),
    ]
    grader = Path(sys.executable).parent / "grader"
    cli_command = [
        str(grader) if grader.exists() else "grader",
        "score",
        "--qrels",
        str(files.qrels_tsv),
        "--run",
        str(files.run_trec),
        "--format",
        "json",
    ]
    for name in MEASURES:
        cli_command += ["--measure", name]
    plan = [
        ("a", Result("beir", "(a) BEIR: json.load + pytrec_eval + average", [*me, *common, "--child", "beir"])),
        ("b", Result("ranx", "(b) ranx: from_file (TREC) + evaluate", [*me, *common, "--child", "ranx"])),
        ("c", Result("cli", "(c) grader score (CLI, end to end)", cli_command)),
        ("d", Result("engine", "(d) grader: Run.build, evaluate in memory", [*me, *common, "--child", "engine"])),
        ("d", Result("pytrec", "(d) pytrec_eval: evaluate in memory", [*me, *common, "--child", "pytrec"])),
    ]
    results: dict[str, Result] = {}
    load_before = os.getloadavg()
    for letter, result in plan:
        if letter in args.only and letter not in "ac":
            results[result.key] = measure(result)
    for _ in range(max(1, args.rounds)):
        for letter, result in plan:
            if letter in args.only and letter in "ac":
                results[result.key] = measure(result)
    print(f"load average before the contenders: {', '.join(f'{x:.1f}' for x in load_before)}", flush=True)
    if not results:
        return 0  # --only without a contender: the data is generated, nothing to report

    text = report(results, args, command, machine_facts(), sizes)
    print()
    print(text)
    default_size = args.queries == DEFAULT_QUERIES and args.depth == DEFAULT_DEPTH and args.corpus == DEFAULT_CORPUS
    markdown = args.markdown or (REPO / "bench" / "results" / "metrics.md" if default_size and args.only == "abcd" else files.folder / "metrics.md")
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(text, encoding="utf-8")
    print(f"wrote {markdown}")
    failed = [r.label for r in results.values() if r.error]
    # ranx may differ (tie order, reported above); the trec_eval-exact contenders may not.
    reference = results["cli"].means.get("NDCG@10") if "cli" in results and not results["cli"].error else None
    disagree = [
        r.label
        for key, r in results.items()
        if key in ("beir", "engine", "pytrec")
        and not r.error
        and reference is not None
        and abs(r.means.get("NDCG@10", math.inf) - reference) > TOLERANCE
    ]
    for label in failed + disagree:
        print(f"FAILED: {label}", file=sys.stderr)
    return 1 if failed or disagree else 0


if __name__ == "__main__":
    sys.exit(main())
