"""Scoring a worker's compact runs in a separate, memory-bounded process (the server's side of issue 22).

The server never scores in its event loop or thread pool: a run of the largest CoIR
task is about 0.4 GB of arrays once decoded. :func:`score_in_child` starts
``python -m grader.grading.score_process`` (spawned, not forked: the server has
threads and open database connections), which bounds its own address space
(``RLIMIT_AS``) before it reads anything, scores through
:func:`grader.grading.scoring.report_from_runs` (the path ``grader run`` takes) and
writes the report. A refused run, a child out of memory or time: :class:`TaskFailure` (``INFRA``).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.errors import GraderError, TaskFailure
from grader.failures import FailureCode

#: The scoring child's address-space bound: numpy, pyarrow and a 0.4 GB run fit well within it.
ADDRESS_SPACE_BYTES = 8 << 30
#: Seconds a scoring may take (CoIR's largest task scores in seconds).
TIMEOUT_S = 600.0
#: Exit status of a child that wrote its refusal in error.json.
_EXIT_REFUSED = 3


def score_in_child(job: dict[str, Any], *, address_space: int = ADDRESS_SPACE_BYTES, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """The report of ``job`` (see :func:`_score`), scored in a fresh child process under ``address_space`` bytes."""
    with tempfile.TemporaryDirectory(prefix="grader-score-") as scratch:
        work = Path(scratch)
        jsonio.write_json(work / "job.json", job, ensure_ascii=True)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "grader.grading.score_process", str(work), str(address_space)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TaskFailure(FailureCode.INFRA, f"scoring took longer than {timeout_s:g} s") from None
        if done.returncode == 0:
            report: dict[str, Any] = jsonio.load_file(work / "report.json", max_bytes=1 << 30)
            return report
        if done.returncode == _EXIT_REFUSED and (work / "error.json").is_file():
            error = jsonio.load_file(work / "error.json", max_bytes=1 << 20)
            raise TaskFailure(FailureCode.INFRA, str(error["message"]))
        tail = done.stderr.decode("utf-8", "replace")[-2000:]
        raise TaskFailure(FailureCode.INFRA, f"the scoring process failed (exit status {done.returncode}): {tail}")


def _score(job: dict[str, Any]) -> dict[str, Any]:
    """Score the runs ``job`` names: ``benchmark`` (a target), ``split``, ``tasks``, ``facts``, ``runs`` (task: path), ``top_k``, ``policy``."""
    from grader.data.registry import resolve_benchmark
    from grader.grading.interfaces import RunOptions
    from grader.grading.scoring import report_from_runs
    from grader.metrics.policy import Policy

    benchmark = resolve_benchmark(job["benchmark"])
    options = RunOptions(benchmark=benchmark, tasks=list(job["tasks"]), split=job["split"], out_dir=Path("."), policy=Policy(job["policy"]))
    runs = {name: Path(path).read_bytes() for name, path in job["runs"].items()}
    return report_from_runs(
        benchmark,
        split=options.split,
        tasks=options.tasks,
        facts=job["facts"],
        runs=runs,
        measures=options.effective_measures(),
        policy=options.policy,
        top_k=int(job["top_k"]),
    )


def _main(work: Path) -> int:
    job = jsonio.load_file(work / "job.json", max_bytes=1 << 26)
    try:
        report = _score(job)
    except (GraderError, KeyError, TypeError, ValueError) as error:  # the worker's facts or runs: refused, never a crash
        message = error.detail if isinstance(error, TaskFailure) else f"{type(error).__name__}: {error}"
        jsonio.write_json(work / "error.json", {"message": message[:4000]}, ensure_ascii=True)
        return _EXIT_REFUSED
    except MemoryError:
        jsonio.write_json(work / "error.json", {"message": "scoring ran out of its memory bound"})
        return _EXIT_REFUSED
    jsonio.write_json(work / "report.json", report)
    return 0


if __name__ == "__main__":  # pragma: no cover - the child process
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    raise SystemExit(_main(Path(sys.argv[1])))
