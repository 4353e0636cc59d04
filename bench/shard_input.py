"""Benchmark: what reading one shard of a worker copy costs in memory, and what the export costs in time.

Not a test of results (``tests/test_shard_input.py`` checks those): this measures. From the repository root::

    .venv/bin/python bench/shard_input.py                        # N = 30k, 100k, 300k synthetic documents
    .venv/bin/python bench/shard_input.py --docs 5000 20000      # a smoke run

For each N: the synthetic task of ``bench/synthetic_corpus.py`` is generated, its worker copy
exported (:func:`grader.hosting.protocol.worker_data.export_worker_data`, timed: it writes the corpus
sorted by pseudonym and the ``corpus.order`` sidecar), and then, each in a fresh process
(``--child``), shard 0 (a full one) is read with :func:`grader.grading.shard_input.read_shard`:

* ``copy``: from the worker copy (the sidecar's slice and the shard's lines, verified);
* ``plain``: from the same corpus without its sidecar (the whole corpus read and planned in
  memory, the path a plain benchmark folder takes), for contrast.

A thread samples ``RssAnon`` every millisecond (``bench/shard_memory.py``'s sampler); the figure
is the peak above the process's baseline after its imports. Writes ``bench/results/shard_input.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARD_DOCUMENTS = 16_384  # two chunks of 8,192: the shard a job reads, whatever N
KEY_SEED = b"bench/shard_input.py"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_for_shard_input", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def child(task_folder: Path) -> dict[str, int | float]:
    """Read shard 0 of the task at ``task_folder``; the memory figures (run in a fresh process)."""
    from grader.data.task import Task
    from grader.grading.shard_input import read_shard
    from grader.retrieval.encoder import BatchPolicy

    sampler_module = _load("shard_memory")
    chunk = BatchPolicy().chunk_size
    baseline = sampler_module.anonymous_rss()
    started = time.perf_counter()
    with sampler_module.PeakSampler() as sampler:
        shard = read_shard(Task(task_folder, "synthetic"), 0, chunk_size=chunk, shard_documents=SHARD_DOCUMENTS)
    elapsed = time.perf_counter() - started
    return {"documents": len(shard.documents), "baseline": baseline, "peak": sampler.peak, "above": sampler.peak - baseline, "read_s": elapsed}


def _measure(task_folder: Path) -> dict[str, int | float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, __file__, "--child", str(task_folder)], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_size(documents: int, folder: Path) -> dict[str, object]:
    """Generate, export and read at ``documents``; the row of figures."""
    from grader.data.registry import resolve_benchmark
    from grader.hosting.protocol.worker_data import export_worker_data
    from grader.sandbox.blinding import BlindingKey

    bench = resolve_benchmark(str(_load("synthetic_corpus").generate(folder / "bench", documents, 100, seed=0)))
    key = BlindingKey(hashlib.sha256(KEY_SEED).digest())
    started = time.perf_counter()
    export_worker_data(bench, ["synthetic"], ["test"], key, folder / "copy")
    export_s = time.perf_counter() - started
    plain = folder / "plain"
    plain.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copy(folder / "copy" / "synthetic" / name, plain / name)
    return {
        "n": documents,
        "export_s": export_s,
        "sidecar": (folder / "copy" / "synthetic" / "corpus.order").stat().st_size,
        "copy": _measure(folder / "copy" / "synthetic"),
        "plain": _measure(plain),
    }


def _mib(value: float) -> str:
    return f"{value / (1 << 20):,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, nargs="*", default=[30_000, 100_000, 300_000])
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "shard_input.md")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    rows = []
    for n in args.docs:
        with tempfile.TemporaryDirectory(prefix="grader-shard-input-") as folder:
            rows.append(one_size(n, Path(folder)))
            print(json.dumps(rows[-1]), file=sys.stderr)
    lines = [
        f"# Reading one shard of a worker copy: anonymous RSS vs corpus size ({platform.machine()}, {os.cpu_count()} cores)",
        "",
        f"`bench/shard_input.py --docs {' '.join(map(str, args.docs))}`, {time.strftime('%Y-%m-%d', time.gmtime())}; "
        f"shard 0 of {SHARD_DOCUMENTS:,} documents (chunk 8,192), synthetic CoIR-like texts (bench/synthetic_corpus.py).",
        "",
        "| documents | export (s) | corpus.order (MiB) | copy: peak anon above baseline (MiB) | copy: read (s) "
        "| plain folder, whole corpus: above baseline (MiB) | plain: read (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        copy, plain = row["copy"], row["plain"]
        assert isinstance(copy, dict) and isinstance(plain, dict)
        lines.append(
            f"| {row['n']:,} | {row['export_s']:.1f} | {_mib(float(row['sidecar']))} "  # type: ignore[arg-type]
            f"| {_mib(copy['above'])} | {copy['read_s']:.2f} | {_mib(plain['above'])} | {plain['read_s']:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
