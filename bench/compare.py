"""Benchmark: ``grader compare`` versus ranx's ``compare`` with the same tests on the same runs.

Not a test: timings live here, never in ``tests/``. Run from the repository root::

    .venv/bin/python bench/compare.py                          # full: mini runs, 8 runs x 5,000 queries, 20 reports x 50,000 queries (~10 min)
    .venv/bin/python bench/compare.py --queries 2000 --runs 4 --no-scale   # a smoke run

What it does, in one process:

1. makes runs: (a) four BM25 runs of mini's text2code test split
   (``scripts/bm25_baseline.py`` with k1/b = 0.9/0.4, 1.2/0.75, 0.6/0.3, and
   the first truncated to its top 5), (b) ``--runs`` synthetic TREC runs over
   ``--queries`` queries, 20 candidates each, one relevant document per query
   whose score is N(0.1 * run, 1) against N(0, 1) for the others; every run is
   scored and signed with ``grader score --measure NDCG@10 --sign`` (not timed);
2. times, per data set, after a warm-up call on a tiny input (numba compiles once), the
   faster of two calls (ranx's fisher test: one call):
   * ``grader compare REPORTS --json --resamples B`` in-process (signature
     verification, bootstrap intervals and rank intervals, sign-flip
     randomization test, paired t-test, Holm, groups);
   * ranx ``compare(qrels, runs, ["ndcg@10"], stat_test="student")`` and
     ``compare(..., stat_test="fisher", n_permutations=B)`` over the same runs,
     already loaded as ``ranx.Run`` objects (ranx computes NDCG@10 itself;
     loading files is not timed);
3. checks that the t-test p-values of both agree (largest relative difference,
   must be <= 1e-9) and reports the largest difference of the randomization
   p-values (both Monte Carlo: they agree within sampling error, about 0.01);
4. optionally (``--scale``, on by default) times ``grader compare --json`` over
   20 signed reports x 50,000 queries of synthetic per-query values (built
   once with ``build_report`` and signed; not timed) at ``--resamples``;
5. prints a Markdown table and writes it to ``bench/results/compare.md`` for a
   full run, else to ``WORKDIR/compare.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from datetime import UTC
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ranx  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from grader.cli.main import cli  # noqa: E402
from grader.reports.keys import write_keypair  # noqa: E402

MINI_TASK = ROOT / "grader" / "bundled" / "mini" / "text2code"


def invoke(*args: Any) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exit_code != 0:
        raise SystemExit(f"grader {' '.join(map(str, args[:2]))} failed: {result.output}")
    return result.stdout


def sign_runs(qrels: Path, runs: list[Path], key: Path) -> list[Path]:
    reports = []
    for run in runs:
        report = run.parent / "reports" / run.stem / "report.dsse.json"
        if not report.exists():
            invoke("score", "--qrels", qrels, "--run", run, "--measure", "NDCG@10", "--out", report, "--sign", key)
        reports.append(report)
    return reports


def mini_runs(out: Path) -> tuple[Path, list[Path]]:
    folder = out / "mini"
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    for k1, b in ((0.9, 0.4), (1.2, 0.75), (0.6, 0.3)):
        path = folder / f"bm25-k{k1}-b{b}.jsonl"
        if not path.exists():
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "scripts" / "bm25_baseline.py"),
                    str(MINI_TASK),
                    "--split",
                    "test",
                    "--out",
                    str(path),
                    "--k1",
                    str(k1),
                    "--b",
                    str(b),
                ],
                check=True,
                capture_output=True,
            )
        runs.append(path)
    top5 = folder / "bm25-k0.9-b0.4-top5.jsonl"
    if not top5.exists():
        rows = [json.loads(line) for line in runs[0].read_text().splitlines()]
        top5.write_text("".join(json.dumps({**row, "hits": row["hits"][:5]}) + "\n" for row in rows))
    runs.append(top5)
    untied = []
    for path in runs:
        # BM25 scores tie; trec_eval (and the grader) break ties by doc id, ranx does not. Scores that
        # follow the trec_eval order without ties give both the same rankings, hence the same NDCG@10.
        target = folder / "untied" / path.name
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            for row in rows:
                ordered = sorted(row["hits"], key=lambda hit: (-hit["score"], _descending(hit["id"])))
                row["hits"] = [{"id": hit["id"], "score": float(len(ordered) - rank)} for rank, hit in enumerate(ordered)]
            target.write_text("".join(json.dumps(row) + "\n" for row in rows))
        untied.append(target)
    return MINI_TASK / "qrels" / "test.tsv", untied


def _descending(text: str) -> tuple[int, ...]:
    return tuple(-byte for byte in text.encode())


def synthetic_runs(out: Path, runs: int, queries: int, seed: int = 0) -> tuple[Path, list[Path]]:
    folder = out / f"synthetic-{runs}x{queries}"
    folder.mkdir(parents=True, exist_ok=True)
    qrels = folder / "qrels.tsv"
    candidates = 20
    rng = np.random.default_rng(seed)
    relevant = rng.integers(0, candidates, queries)
    if not qrels.exists():
        qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{q}\td{q}-{relevant[q]}\t1\n" for q in range(queries)))
    paths = []
    for run in range(runs):
        path = folder / f"run{run:02d}.trec"
        paths.append(path)
        if path.exists():
            continue
        scores = np.random.default_rng([seed, run]).normal(0, 1, (queries, candidates))
        scores[np.arange(queries), relevant] += 0.1 * run
        lines = []
        for q in range(queries):
            order = np.argsort(-scores[q], kind="stable")
            lines += [f"q{q} Q0 d{q}-{d} {rank + 1} {float(scores[q, d])!r} run{run}\n" for rank, d in enumerate(order)]
        path.write_text("".join(lines))
    return qrels, paths


def ranx_inputs(qrels_path: Path, runs: list[Path]) -> tuple[ranx.Qrels, list[ranx.Run]]:
    judged: dict[str, dict[str, int]] = {}
    for line in qrels_path.read_text().splitlines()[1:]:
        query, doc, grade = line.split("\t")
        judged.setdefault(query, {})[doc] = int(grade)
    loaded = []
    for path in runs:
        ranking: dict[str, dict[str, float]] = {}
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                row = json.loads(line)
                ranking[row["query_id"]] = {hit["id"]: float(hit["score"]) for hit in row["hits"]}
        else:
            for line in path.read_text().splitlines():
                query, _, doc, _, score, _ = line.split()
                ranking.setdefault(query, {})[doc] = float(score)
        for query in judged:  # a query the run omits scores 0 under both (grader's strict policy)
            ranking.setdefault(query, {})
        loaded.append(ranx.Run(ranking, name=path.name))
    return ranx.Qrels(judged), loaded


def timed(function: Any, repeats: int = 2) -> tuple[float, Any]:
    """The fastest of ``repeats`` calls (the first may pay one-off costs such as numba compilation) and the last value."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        best = min(best, time.perf_counter() - start)
    return best, value


def compare_dataset(name: str, qrels: Path, runs: list[Path], key: Path, public: Path, out: Path, resamples: int) -> dict[str, Any]:
    reports = sign_runs(qrels, runs, key)
    ranx_qrels, ranx_runs = ranx_inputs(qrels, runs)
    grader_seconds, printed = timed(lambda: invoke("compare", *reports, "--key", public, "--json", "--resamples", resamples))
    ours = json.loads(printed)
    student_seconds, student = timed(lambda: ranx.compare(ranx_qrels, ranx_runs, ["ndcg@10"], stat_test="student").to_dict())
    # Once: ranx's permutation test is the slow part, and the student call before it paid ranx's one-off costs.
    fisher_seconds, fisher = timed(
        lambda: ranx.compare(ranx_qrels, ranx_runs, ["ndcg@10"], stat_test="fisher", n_permutations=resamples).to_dict(), repeats=1
    )
    t_diff = 0.0
    fisher_diff = 0.0
    for pair in ours["pairs"]:
        # `grader score` names a report's subject after its run file, as ranx's runs are named here.
        a, b = pair["first"], pair["second"]
        theirs_t = float(student[a]["comparisons"][b]["ndcg@10"])
        t_diff = max(t_diff, abs(pair["t_p"] - theirs_t) / max(theirs_t, 1e-300))
        fisher_diff = max(fisher_diff, abs(pair["randomization_p"] - float(fisher[a]["comparisons"][b]["ndcg@10"])))
    queries = ours["queries"]
    return {
        "data": name,
        "runs": len(runs),
        "queries": queries,
        "pairs": len(ours["pairs"]),
        "grader": grader_seconds,
        "ranx_student": student_seconds,
        "ranx_fisher": fisher_seconds,
        "t_rel_diff": t_diff,
        "fisher_abs_diff": fisher_diff,
    }


def scale_reports(out: Path, key: Path, entries: int, queries: int) -> list[Path]:
    """``entries`` signed reports over one task of ``queries`` queries, built directly (no run to score), once."""
    from datetime import datetime

    from grader.reports.model import build_report
    from grader.reports.signing import write_signed_report

    folder = out / f"scale-{entries}x{queries}"
    rng = np.random.default_rng(0)
    ids = [f"q{i:06d}" for i in range(queries)]
    base = rng.random(queries)
    now = datetime.now(UTC)
    paths = []
    for entry in range(entries):
        path = folder / f"e{entry:02d}" / "report.dsse.json"
        paths.append(path)
        values = np.clip(base + rng.normal(0.002 * entry, 0.2, queries), 0, 1).tolist()
        if path.exists():
            continue
        mean = math.fsum(values) / queries
        task = {
            "name": "task",
            "split": "test",
            "data_digest": {"sha256": "0" * 64},
            "status": "scored",
            "measures": {"NDCG@10": mean},
            "queries": {"judged": queries, "answered": queries, "missing": 0, "extra": 0},
            "per_query": {"measure": "NDCG@10", "values": dict(zip(ids, values))},
        }
        report = build_report(
            benchmark={"name": "synthetic", "version": "1", "primary_measure": "NDCG@10"},
            subject={"kind": "run-file", "name": f"e{entry:02d}", "digest": {"sha256": f"{entry:064x}"}},
            tasks=[task],
            aggregate={"measure": "NDCG@10", "score": mean, "complete": True, "groups": {}},
            policy="strict",
            started_at=now,
            finished_at=now,
        )
        write_signed_report(report, key, path)
    return paths


def cli_scale(out: Path, key: Path, public: Path, resamples: int) -> float:
    reports = scale_reports(out, key, 20, 50_000)
    seconds, _ = timed(lambda: invoke("compare", *reports, "--key", public, "--json", "--resamples", resamples), repeats=1)
    return seconds


def warm_up() -> None:
    qrels = ranx.Qrels({"q1": {"d1": 1}, "q2": {"d2": 1}})
    runs = [ranx.Run({"q1": {"d1": 1.0, "d2": 0.5}, "q2": {"d1": 1.0, "d2": 0.5}}, name=n) for n in ("a", "b")]
    for test in ("student", "fisher"):
        ranx.compare(qrels, runs, ["ndcg@10"], stat_test=test, n_permutations=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--queries", type=int, default=5_000)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--scale", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "compare")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    key, public = args.workdir / "keys" / "grader.key", args.workdir / "keys" / "grader.pub"
    if not key.exists():
        write_keypair(args.workdir / "keys")
    warm_up()
    rows = []
    qrels, runs = mini_runs(args.workdir)
    rows.append(compare_dataset("mini text2code, BM25 variants", qrels, runs, key, public, args.workdir, args.resamples))
    qrels, runs = synthetic_runs(args.workdir, args.runs, args.queries)
    rows.append(compare_dataset(f"synthetic, {args.runs} runs", qrels, runs, key, public, args.workdir, args.resamples))
    scale = cli_scale(args.workdir, key, public, args.resamples) if args.scale else None
    full = args.runs >= 8 and args.queries >= 5_000 and args.resamples >= 10_000 and args.scale
    output = args.output or (ROOT / "bench" / "results" / "compare.md" if full else args.workdir / "compare.md")
    text = render(rows, scale, args)
    print(text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")
    worst = max(row["t_rel_diff"] for row in rows)
    if worst > 1e-9:
        raise SystemExit(f"t-test p-values differ from ranx's by {worst:.1e} (relative); expected identical")


def render(rows: list[dict[str, Any]], scale: float | None, args: argparse.Namespace) -> str:
    cpu = os.cpu_count()
    lines = [
        "# `grader compare` vs ranx `compare`",
        "",
        f"Command: `.venv/bin/python bench/compare.py --runs {args.runs} --queries {args.queries} --resamples {args.resamples}{'' if args.scale else ' --no-scale'}`",
        f"Machine: {platform.machine()}, {cpu} CPUs (shared with other jobs; load average {os.getloadavg()[0]:.1f} at the end), Python {platform.python_version()}, numpy {np.__version__}, ranx {metadata.version('ranx')}, scipy {metadata.version('scipy')}.",
        "",
        f"B = {args.resamples:,} resamples / permutations. grader: one call does signature verification of every report, bootstrap",
        "95% intervals and rank intervals, sign-flip randomization test, paired t-test, Holm's correction and groups over all pairs.",
        'ranx: `compare(..., stat_test="student")` and `compare(..., stat_test="fisher", n_permutations=B)`, which also compute',
        "NDCG@10 from the runs; no interval, no rank, no correction.",
        "",
        "| data | runs | queries | pairs | grader compare (s) | ranx student (s) | ranx fisher (s) | ranx both / grader | t-test p: max rel. diff | randomization p: max abs. diff |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ratio = (row["ranx_student"] + row["ranx_fisher"]) / row["grader"]
        lines.append(
            f"| {row['data']} | {row['runs']} | {row['queries']:,} | {row['pairs']} | {row['grader']:.2f} | {row['ranx_student']:.2f} | "
            f"{row['ranx_fisher']:.2f} | {ratio:.1f}x | {row['t_rel_diff']:.1e} | {row['fisher_abs_diff']:.4f} |"
        )
    if scale is not None:
        lines += [
            "",
            f"At scale: `grader compare --json` over 20 signed reports x 50,000 queries (synthetic per-query values), {args.resamples:,} resamples,",
            f"190 pairs, everything above including the 20 signature checks: {scale:.1f} s.",
        ]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
