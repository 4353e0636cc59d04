"""``--sandbox none``: the ONNX encoder in a child process, under the time and memory limits.

Not a sandbox (the child has the grader's user, files and network), but the
limits hold: each task's encoding runs in a fresh child process that

* is killed with SIGKILL at ``--time-limit`` (wall clock, counted from its
  start): the task fails with ``TIMEOUT``;
* is killed as soon as its resident memory exceeds ``--memory`` (the parent
  samples ``/proc/PID/status`` every 20 ms, so a burst shorter than that can
  overshoot briefly; ``RLIMIT_AS`` at several times the limit is a hard
  backstop): the task fails with ``OOM``;
* with ``--cpus N`` given, is pinned to ``ceil(N)`` of the grader's cores
  (CPU affinity; a fractional share is rounded up).

The model and tokenizer are loaded in the child, so their own allocations count
too. The report marks such a grade ``"isolated": false``. ``--runtime`` cannot
be honoured in-process and is refused.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from grader import jsonio
from grader.data.task import document_text
from grader.errors import SubmissionError, TaskFailure, failure_code
from grader.failures import FailureCode
from grader.files import atomic_write_bytes
from grader.grading.cost import RankCost
from grader.grading.interfaces import SEARCHING, ProgressListener, Ranked, RunOptions, TaskInputs
from grader.retrieval.search import search_run
from grader.sandbox.limits import SandboxLimits
from grader.sandbox.owner import owned_tempdir
from grader.sandbox.usage import ResourceUsage
from grader.submissions.manifest import OnnxManifest

#: How often the parent samples the child's resident memory.
_SAMPLE_S = 0.02
#: Exit status of a child that reports a submission fault in error.json.
_EXIT_REPORTED = 3
#: RLIMIT_AS backstop: address space is far larger than resident memory (thread stacks, arenas, mappings).
_AS_FACTOR = 4
_AS_FLOOR = 4 << 30


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this (child) process when the grader dies, so it cannot outlive its limits."""
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the grader died before prctl took effect
        os._exit(1)


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class ChildProcessOnnx:
    """Encodes each task in a fresh, limited child process; searches in the grader."""

    def __init__(self, folder: Path, manifest: OnnxManifest, threads: int, limits: SandboxLimits, *, pin_cpus: bool = False) -> None:
        self.folder = folder
        self.manifest = manifest
        self.threads = threads
        self.limits = limits
        #: the cores the child may use (``--cpus`` given), or None: all of the grader's
        self.cores: list[int] | None = None
        if pin_cpus:
            allowed = sorted(os.sched_getaffinity(0))
            self.cores = allowed[: max(1, min(len(allowed), math.ceil(limits.cpus)))]
        #: what the last :meth:`rank` used (the report's ``cost`` block), also when it failed; None before it ran
        self.last_cost: RankCost | None = None

    def report(self) -> dict[str, Any]:
        """The sandbox fields of the report: in-process, not isolated, with the limits in force."""
        limits: dict[str, Any] = {"time_limit_s": self.limits.time_limit_s, "memory_bytes": self.limits.memory_bytes}
        enforcement = "child process: wall-clock kill, resident-memory watch"
        if self.cores is not None:
            limits["cpus"] = self.limits.cpus
            enforcement += f", pinned to {len(self.cores)} core(s)"
        return {"kind": "none", "threads": self.threads, "isolated": False, "limits": {**limits, "enforcement": enforcement}}

    def rank(self, inputs: TaskInputs, options: RunOptions, reporter: ProgressListener, *, keep_output: Path | None = None) -> Ranked:
        """Encode both sides in a fresh limited child, then search here (``keep_output``: nothing to keep, the output never leaves the grader)."""
        name = inputs.task.name
        self.last_cost = None
        # Owned: if the grader is SIGKILLed, the next start sweeps the texts staged here (its child dies with it).
        with owned_tempdir("grader-encode-") as work:
            job = {
                "folder": str(self.folder),
                "threads": self.threads,
                "sides": {
                    "corpus": {
                        "prefix": self.manifest.document_prefix,
                        "texts": [document_text(d.title, d.text) for d in inputs.documents],
                        "ids": [d.id for d in inputs.documents],
                    },
                    "queries": {
                        "prefix": self.manifest.query_prefix,
                        "texts": [q.text for q in inputs.queries],
                        "ids": [q.id for q in inputs.queries],
                    },
                },
            }
            # A scratch file the child reads once it exists; ASCII, so a lone surrogate in a text is escaped, not an encoding error.
            (work / "job.json").write_text(jsonio.dumps(job, ensure_ascii=True), encoding="ascii")
            progress = {
                "corpus": reporter.progress(f"{name}: corpus", len(inputs.documents)),
                "queries": reporter.progress(f"{name}: queries", len(inputs.queries)),
            }
            self._run_child(work, progress, options.out_dir / "logs" / f"{name}.log")
            corpus = np.load(work / "corpus.npy", allow_pickle=False)
            queries = np.load(work / "queries.npy", allow_pickle=False)
            meta = jsonio.load_file(work / "meta.json")
        searching = time.monotonic()
        reporter.stage(name, SEARCHING)
        run = search_run([q.id for q in inputs.queries], [d.id for d in inputs.documents], queries, corpus, options.top_k)
        if self.last_cost is not None:
            tokens = meta.get("tokens")
            self.last_cost = replace(self.last_cost, search_s=time.monotonic() - searching, tokens=tokens if isinstance(tokens, int) else None)
        encoding = {"queries": meta["queries"], "corpus": meta["corpus"], "dimension": int(meta["dimension"])}
        return Ranked(run, {"encoding": encoding}, queries, corpus)

    def _run_child(self, work: Path, progress: dict[str, Any], log_path: Path) -> None:
        memory = self.limits.memory_bytes
        address_space = max(memory * _AS_FACTOR, memory + _AS_FLOOR)
        # The child sets its own rlimits and parent-death signal first thing (no preexec_fn: the grader has threads).
        child = subprocess.Popen(
            [sys.executable, "-m", "grader.grading.inprocess", str(work), str(os.getpid()), str(address_space)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "OMP_NUM_THREADS": str(self.threads)},
        )
        if self.cores is not None:
            # At once, before the child has imported anything or started a thread (threads inherit it).
            with contextlib.suppress(OSError):
                os.sched_setaffinity(child.pid, self.cores)
        reader = threading.Thread(target=_relay_progress, args=(child, progress), daemon=True)
        reader.start()
        tail = bytearray()
        # The child's stderr stays on the host (as a container's log does), its last bytes only.
        collector = threading.Thread(target=_keep_tail, args=(child, tail, self.limits.log_bytes), daemon=True)
        collector.start()
        started = time.monotonic()
        verdict: FailureCode | None = None
        peak = 0
        # The child is reaped here with wait4, not by Popen, for its own resource usage (the cost block's figures).
        reaped = _Reaped()
        try:
            while not reaped.reap(child, block=False):
                rss = _rss_bytes(child.pid)
                peak = max(peak, rss)
                if rss > memory:
                    verdict = FailureCode.OOM
                elif time.monotonic() - started >= self.limits.time_limit_s:
                    verdict = FailureCode.TIMEOUT
                if verdict is not None:
                    child.kill()
                    break
                time.sleep(_SAMPLE_S)
        finally:
            if child.returncode is None:
                child.kill()
                reaped.reap(child, block=True)
            reader.join(5)
            collector.join(5)
            atomic_write_bytes(log_path, bytes(tail))
        self.last_cost = reaped.cost((time.monotonic() if reaped.ended is None else reaped.ended) - started)
        if verdict is FailureCode.TIMEOUT:
            raise TaskFailure(verdict, f"killed after the {self.limits.time_limit_s:g} s time limit")
        if verdict is FailureCode.OOM:
            raise TaskFailure(verdict, f"killed for exceeding the {memory}-byte memory limit (resident memory {peak} bytes)")
        if child.returncode == 0:
            return
        reported = work / "error.json"
        if child.returncode == _EXIT_REPORTED and reported.is_file():
            error = jsonio.load_file(reported, max_bytes=1 << 20)
            raise TaskFailure(str(error["code"]), str(error["message"]))
        if child.returncode == -signal.SIGKILL or child.returncode == -signal.SIGSEGV or child.returncode < 0:
            # Most likely an allocation refused by the RLIMIT_AS backstop that the runtime could not survive.
            raise TaskFailure(
                FailureCode.OOM if child.returncode == -signal.SIGKILL else FailureCode.MODEL_ERROR,
                f"the encoder process died of signal {-child.returncode}",
            )
        raise TaskFailure(FailureCode.MODEL_ERROR, f"the encoder process failed (exit status {child.returncode}); its log is {log_path}")


class _Reaped:
    """A child reaped with ``wait4``: when it ended, and the kernel's account of what it used."""

    def __init__(self) -> None:
        self.ended: float | None = None
        self.rusage: resource.struct_rusage | None = None

    def reap(self, child: subprocess.Popen[bytes], *, block: bool) -> bool:
        """Whether ``child`` has ended (then reaped: its ``returncode`` set, as ``Popen.poll`` would)."""
        if child.returncode is not None:
            return True
        pid, status, usage = os.wait4(child.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return False
        self.ended, self.rusage = time.monotonic(), usage
        child.returncode = os.waitstatus_to_exitcode(status)
        return True

    def cost(self, wall_s: float) -> RankCost:
        """The child's wall seconds, CPU (user + system) and peak resident memory (``ru_maxrss``, KiB on Linux)."""
        if self.rusage is None:
            return RankCost(wall_s, ResourceUsage.unmeasured("the encoder process was not reaped by the grader"))
        cpu_s = self.rusage.ru_utime + self.rusage.ru_stime
        method = "wait4 of the encoder's child process: user + system CPU, peak resident set (ru_maxrss)"
        return RankCost(wall_s, ResourceUsage(cpu_s, self.rusage.ru_maxrss * 1024, method))


def _keep_tail(child: subprocess.Popen[bytes], tail: bytearray, limit: int) -> None:
    assert child.stderr is not None
    for chunk in iter(lambda: child.stderr.read(65536), b""):  # type: ignore[union-attr]
        tail.extend(chunk)
        if len(tail) > limit:
            del tail[: len(tail) - limit]


def _relay_progress(child: subprocess.Popen[bytes], progress: dict[str, Any]) -> None:
    assert child.stdout is not None
    for raw in child.stdout:
        side, _, count = raw.decode("ascii", "replace").strip().partition(" ")
        if side in progress and count.isdigit():
            progress[side](int(count))


# --------------------------------------------------------------------------- the child


def _child(work: Path) -> int:
    from grader.retrieval.encoder import OnnxEncoder
    from grader.submissions.manifest import load_manifest

    job = jsonio.load_file(work / "job.json")

    def say(side: str) -> Any:
        def advance(count: int) -> None:
            sys.stdout.write(f"{side} {count}\n")
            sys.stdout.flush()

        return advance

    try:
        folder = Path(job["folder"])
        manifest = load_manifest(folder)
        assert isinstance(manifest, OnnxManifest)
        encoder = OnnxEncoder.load(folder, manifest, threads=int(job["threads"]))
        meta: dict[str, Any] = {"dimension": encoder.dimension}
        for side in ("corpus", "queries"):
            spec = job["sides"][side]
            vectors, stats = encoder.encode(spec["texts"], ids=spec["ids"], prefix=spec["prefix"], progress=say(side))
            np.save(work / f"{side}.npy", vectors, allow_pickle=False)
            meta[side] = stats.as_dict()
            meta["tokens"] = int(meta.get("tokens", 0)) + stats.tokens  # the cost block's, not the report's encoding
    except (TaskFailure, SubmissionError) as error:
        message = error.detail if isinstance(error, TaskFailure) else str(error)
        jsonio.write_json(work / "error.json", {"code": failure_code(error), "message": message}, ensure_ascii=True)
        return _EXIT_REPORTED
    except MemoryError:
        jsonio.write_json(
            work / "error.json", {"code": FailureCode.OOM, "message": "an allocation was refused (the memory limit's address-space backstop)"}
        )
        return _EXIT_REPORTED
    jsonio.write_json(work / "meta.json", meta)
    return 0


if __name__ == "__main__":  # pragma: no cover - the child process
    _die_with_parent(int(sys.argv[2]))
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[3]), int(sys.argv[3])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    raise SystemExit(_child(Path(sys.argv[1])))
