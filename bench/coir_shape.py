"""All of CoIR's shape through `grader serve`: the example ONNX submission on the synthetic benchmark of
bench/coir_shape_data.py, two local workers, sharded; wall time, peak memory per process, every task's report
equal to a direct `grader run` of that task.

    .venv/bin/python bench/coir_shape.py [--scale 1.0] [--workers 2] [--shard-documents 65536] [--markdown PATH]
    .venv/bin/python bench/coir_shape.py --scale 0.02 --shard-documents 8192 --markdown bench/results/coir_shape.md

The benchmark (bench/out/coir-shape-synthetic-sSCALE-seedSEED) is generated once and reused. The grade is
bench/scale_corpus.py's: a fresh single-machine `grader serve --workers W` (local workers, SQLite) with
``[sharding] shard_documents``, submissions_example/onnx-lsa (the README's example ONNX submission) on the hidden
split in the Docker sandbox (1 CPU, 4 GiB a container), the clock from `grader submit` to the client seeing
`scored`, and its sampler: peak RssAnon of `grader serve`, each local worker, each worker's grade children (one
per shard or query job) and the server's other children (the scoring processes and the workers' copy export),
and each sandbox container's memory cgroup peak.

Then each of the 20 tasks is graded again by a direct `grader run --tasks TASK` (same sandbox and limits,
unsharded) and its measures are compared with the served report's for that task: equal, number for number, is
the check (sharding promises bit-identical vectors and an exact merge). Targets (issue 38): under 30 minutes
end to end at --scale 1 on an idle 2-core machine, `grader serve` and each worker under 1 GiB (the scoring
processes are reported apart). Exits 1 if a task differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))  # bench/ is not a package: its scripts import each other by name

import coir_shape_data  # noqa: E402
import machine  # noqa: E402
import scale_corpus  # noqa: E402

from grader.reports.dsse import b64decode, parse_envelope  # noqa: E402
from grader.reports.statement import parse_statement  # noqa: E402

GIB_MIB = 1024


def served_report(envelope: bytes) -> dict[str, Any]:
    """The report inside a served DSSE envelope (its signature is not what this benchmark checks)."""
    fields = parse_envelope(envelope)
    return parse_statement(b64decode(fields.payload_b64, what="payload"))["predicate"]


def direct_run(root: Path, task: str, out: Path) -> tuple[dict[str, Any], float]:
    """A direct `grader run` of one task with the served grade's sandbox and limits: its report and wall seconds."""
    limits = scale_corpus.LIMITS
    command = [sys.executable, "-m", "grader", "run", str(scale_corpus.EXAMPLE), "--benchmark", str(root), "--tasks", task]
    command += ["--split", "test", "--sandbox", "docker", "--time-limit", str(limits["time_limit_s"])]
    command += ["--memory", limits["memory"], "--cpus", str(limits["cpus"]), "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"grader run of {task} exited {done.returncode}: {done.stderr.strip()[-600:]}")
    return json.loads((out / "report.json").read_text(encoding="utf-8")), time.perf_counter() - started


def compare(served: dict[str, Any], direct: dict[str, Any], task: str) -> tuple[bool, str]:
    """Whether a task's status and measures are equal in both reports, and a short note (the primary measure)."""
    left, right = served["tasks"].get(task), direct["tasks"].get(task)
    if left is None or right is None:
        return False, "missing from a report"
    equal = left["status"] == right["status"] == "scored" and left["measures"] == right["measures"]
    value = left["measures"].get("NDCG@10")
    note = f"NDCG@10 {float(value):.6f}, {len(left['measures'])} measures" if isinstance(value, int | float) else str(left["status"])
    if not equal:
        differing = sorted(k for k in set(left["measures"]) | set(right["measures"]) if left["measures"].get(k) != right["measures"].get(k))
        note += f"; differs: {', '.join(differing[:6]) or left['status'] + ' vs ' + right['status']}"
    return equal, note


def peaks_by_role(processes: dict[int, tuple[str, int]]) -> dict[str, list[int]]:
    """Peak RssAnon (KiB) per process, grouped: serve, worker, grade child (shard and query jobs), other (scoring, export)."""
    groups: dict[str, list[int]] = {"serve": [], "worker": [], "grade child": [], "other": []}
    for _pid, (role, peak) in sorted(processes.items()):
        groups[role if role in groups else "other"].append(peak)
    return groups


def summary(result: dict[str, Any], made_s: float, documents: int, queries: int) -> list[str]:
    """The figures as Markdown lines: wall time, per-role peaks against the 1 GiB target, containers."""
    mib = scale_corpus.mib
    groups = peaks_by_role(result["processes"])
    containers = [peak for peak, _anon in result["containers"].values()]
    highest = {role: max(values) / 1024 if values else 0.0 for role, values in groups.items()}
    under = highest["serve"] < GIB_MIB and highest["worker"] < GIB_MIB
    return [
        "| documents | queries | generate (s) | served wall (s) | serve (MiB) | workers (MiB) | shard/query job processes (MiB) | scoring and other children (MiB) | containers, peak (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {documents:,} | {queries:,} | {made_s:.1f} | {result['wall_s']:.1f} | {mib(max(groups['serve'], default=0))} | "
        f"{', '.join(mib(v) for v in groups['worker'])} | {span(groups['grade child'], mib)} | {span(groups['other'], mib)} | "
        f"{span(containers, lambda v: mib(v, bytes_=True))} ({len(containers)} sampled) |",
        f"serve and each worker under 1 GiB: {'yes' if under else 'NO'}; "
        + (
            f"wall under 30 min: {'yes' if result['wall_s'] < 1800 else 'NO'}"
            if documents >= 2_390_000
            else "the 30-minute target is for the full 2.39 M documents: not measured at this scale"
        ),
    ]


def span(values: list[int], show: Any) -> str:
    """``low-high`` of a list of peaks, or ``-`` for none."""
    return f"{show(min(values))}-{show(max(values))}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of CoIR's counts (bench/coir_shape_data.py)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-documents", type=int, default=65536, help="[sharding] shard_documents (rounded up to chunks of 8,192)")
    parser.add_argument("--sample-s", type=float, default=0.5)
    parser.add_argument("--skip-direct", action="store_true", help="do not run the 20 direct `grader run`s (no equality check)")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--markdown", type=Path, default=None, help="append the results as Markdown to this file")
    args = parser.parse_args()
    began = time.perf_counter()
    data = coir_shape_data
    args.workdir.mkdir(parents=True, exist_ok=True)
    root = args.workdir / f"{data.NAME}-s{args.scale:g}-seed{args.seed}"
    made = 0.0
    if not (root / "benchmark.json").exists():
        started = time.perf_counter()
        data.generate(root, args.scale, args.seed)
        made = time.perf_counter() - started
    spec = json.loads((root / "benchmark.json").read_text(encoding="utf-8"))
    documents = sum(entry["corpus_size"] for entry in spec["task_info"].values())
    queries = sum(entry["queries"] for entry in spec["task_info"].values())
    lines = [
        f"$ nice -n 10 .venv/bin/python bench/coir_shape.py {' '.join(sys.argv[1:])}",
        machine.machine_line(3) + " at the start",
    ]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="grader-bench-coir-shape-") as scratch:
        result = scale_corpus.grade(root, args.workers, Path(scratch), args.sample_s, scale_corpus.EXAMPLE, args.shard_documents)
        lines.append(f"# load {' '.join(f'{v:.1f}' for v in os.getloadavg())} at the end of the served grade")
        lines += summary(result, made, documents, queries)
        print("\n".join(lines[2:]), flush=True)
        served = served_report(result["report"])
        mismatches = 0
        if not args.skip_direct:
            lines += ["", "| task | documents | served = direct `grader run` | direct wall (s) | note |", "|---|---:|---|---:|---|"]
            for task in spec["tasks"]:
                direct, seconds = direct_run(root, task, Path(scratch) / "direct" / task)
                equal, note = compare(served, direct, task)
                mismatches += not equal
                row = f"| {task} | {spec['task_info'][task]['corpus_size']:,} | {'equal' if equal else 'DIFFERENT'} | {seconds:.1f} | {note} |"
                lines.append(row)
                print(row, flush=True)
    lines.append(f"# whole benchmark (generation, served grade, direct runs): {time.perf_counter() - began:.0f} s")
    detail = {"wall_s": round(result["wall_s"], 2), "rss_anon_kib": [[role, peak] for _pid, (role, peak) in sorted(result["processes"].items())]}
    lines.append("# " + json.dumps(detail))
    print(lines[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as out:
            out.write("\n```\n" + "\n".join(lines) + "\n```\n")
    if mismatches:
        raise SystemExit(f"{mismatches} task(s) differ between the served grade and direct `grader run`")


if __name__ == "__main__":
    main()
