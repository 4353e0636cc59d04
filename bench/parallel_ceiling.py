"""Benchmark: how much faster two encoders run at once on two CPUs than one alone: this machine's ceiling.

Not a test: timings live here. Issue 38 item 3 asks two one-CPU workers for 1.85x one (MiniLM) and 1.75x
(onnx-lsa); a sharded grade's work is almost all encoding in the runner containers, so the speedup two workers
can reach is bounded by how two encoders share the machine's CPUs, caches and memory bandwidth, whatever the
grader does. This script measures that bound with the grader's own encoder (``OnnxEncoder``, one thread, as a
one-CPU container runs it) and no grader around it::

    .venv/bin/python bench/parallel_ceiling.py --submission /path/to/minilm64 --texts 2048 --repeat 3
    .venv/bin/python bench/parallel_ceiling.py --submission submissions_example/onnx-lsa --texts 65536 --repeat 3

Each round runs, in fresh processes pinned with ``sched_setaffinity`` and released together once each has loaded
its encoder and texts: one encoder alone on the first CPU, then two at once, one per CPU (the same texts each),
alternating, ``--repeat`` times. The ceiling of a round is ``2 x alone / slower of the pair``: what two workers
would reach over one if encoding were all of a grade and nothing else ran. The texts are the first ``--texts``
documents of a synthetic corpus of ``bench/synthetic_corpus.py`` (APPS's length distribution).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO / "bench" / "out" / "synthetic-32768-q100-s0" / "synthetic" / "corpus.jsonl.gz"


def _texts(corpus: Path, count: int) -> list[str]:
    texts: list[str] = []
    with gzip.open(corpus, "rt", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            texts.append(record["text"])
            if len(texts) == count:
                break
    if len(texts) < count:
        raise SystemExit(f"{corpus}: {len(texts)} documents, fewer than --texts {count}")
    return texts


def child(cpu: int, submission: Path, corpus: Path, count: int) -> None:
    """Pinned to ``cpu``: load, say ready, wait for the word, encode once, print the seconds."""
    os.sched_setaffinity(0, {cpu})
    from grader.retrieval.encoder import OnnxEncoder
    from grader.submissions.manifest import OnnxManifest, load_manifest

    manifest = load_manifest(submission)
    assert isinstance(manifest, OnnxManifest), f"{submission}: not an ONNX submission"
    encoder = OnnxEncoder.load(submission, manifest, threads=1)
    texts = _texts(corpus, count)
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    encoder.encode(texts)
    print(f"{time.perf_counter() - start:.4f}", flush=True)


def _together(cpus: list[int], submission: Path, corpus: Path, count: int) -> list[float]:
    command = [sys.executable, __file__, "--submission", str(submission), "--corpus", str(corpus), "--texts", str(count), "--child"]
    # One thread each, as in a one-CPU container: the tokenizer's pool too.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    children = [subprocess.Popen([*command, str(cpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for cpu in cpus]
    for process in children:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    for process in children:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    seconds = []
    for process in children:
        assert process.stdout is not None
        seconds.append(float(process.stdout.readline()))
        if process.wait() != 0:
            raise SystemExit(f"a child on CPU {cpus} failed")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submission", type=Path, required=True, help="an ONNX submission folder")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="a corpus.jsonl.gz (default: the 32k synthetic corpus)")
    parser.add_argument("--texts", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.submission, args.corpus, args.texts)
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs two CPUs")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    print(f"# {args.submission.name}: {args.texts} texts, one thread each; CPUs {cpus[0]} (alone) and {cpus[0]},{cpus[1]} (pair)")
    print("| round | alone (s) | pair (s, each) | ceiling 2 x alone / slower |")
    print("|---:|---:|---:|---:|")
    ceilings = []
    for round_ in range(1, args.repeat + 1):
        (alone,) = _together(cpus[:1], args.submission, args.corpus, args.texts)
        pair = _together(cpus[:2], args.submission, args.corpus, args.texts)
        ceiling = 2 * alone / max(pair)
        ceilings.append(ceiling)
        print(f"| {round_} | {alone:.2f} | {pair[0]:.2f}, {pair[1]:.2f} | {ceiling:.3f} |", flush=True)
    print(f"# ceiling, median of {args.repeat}: {statistics.median(ceilings):.3f} ({', '.join(f'{c:.3f}' for c in ceilings)})")


if __name__ == "__main__":
    main()
