"""What a task grader consumes and produces, apart from the loop that drives it.

A *task grader* turns one task's inputs into a ranking: in-process ONNX
(:mod:`grader.grading.inprocess`), the ONNX runner image and submitted Docker
images (:mod:`grader.grading.sandboxed`) all implement :class:`TaskGrader`.
The grading loop (:func:`grader.grading.runner.grade_submission`), ``grader
check`` and the hosting workers obtain one from
:func:`grader.grading.backends.prepare_task_grader` and call :meth:`TaskGrader.rank`;
none of them knows how a backend ranks.

This module imports no backend and no orchestrator, so both can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from grader.data.benchmark import Benchmark
from grader.data.qrels import Qrels
from grader.data.task import Document, Query, Task
from grader.metrics.measures import Measure, default_measures, parse_measure
from grader.metrics.policy import Policy
from grader.runs.run import Run
from grader.sandbox.blinding import BlindingKey, Preblinded
from grader.sandbox.limits import SandboxLimits

#: The stage a task grader names once its vectors are in and the search of each query's ranking runs.
SEARCHING = "searching"


class ProgressListener(Protocol):
    """What the grading loop tells a person while it works (the CLI prints it on stderr; workers stay silent)."""

    def task_started(self, task: str, *, documents: int, queries: int) -> None: ...

    def task_finished(self, task: str, entry: dict[str, Any], *, resumed: bool) -> None: ...

    def progress(self, label: str, total: int) -> Callable[[int], None]: ...

    def stage(self, task: str, stage: str) -> None:
        """``task`` moved to ``stage`` (:data:`SEARCHING`: its vectors are in, the search runs)."""
        ...

    def note(self, text: str) -> None: ...

    def finish(self) -> None: ...


class SilentProgress:
    """A :class:`ProgressListener` that says nothing (``grader check`` prints its own steps; workers log elsewhere)."""

    def task_started(self, task: str, *, documents: int, queries: int) -> None:
        return None

    def task_finished(self, task: str, entry: dict[str, Any], *, resumed: bool) -> None:
        return None

    def progress(self, label: str, total: int) -> Callable[[int], None]:
        return lambda count: None

    def stage(self, task: str, stage: str) -> None:
        return None

    def note(self, text: str) -> None:
        return None

    def finish(self) -> None:
        return None


@dataclass(frozen=True)
class RunOptions:
    """How to grade: the benchmark and tasks, the split, the sandbox and its limits, what to measure and keep."""

    benchmark: Benchmark
    tasks: list[str]
    split: str
    out_dir: Path
    policy: Policy = Policy.STRICT
    key_path: Path | None = None
    threads: int = 1
    top_k: int = 1000
    measures: tuple[Measure, ...] = field(default_factory=tuple)
    sandbox: str = "auto"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    pca_dims: tuple[int, ...] = ()
    keep_embeddings: bool = False
    #: Limit options given on the command line (``--cpus``, ``--runtime``): in-process, ``--cpus`` pins the
    #: encoder to that many cores and ``--runtime`` is refused.
    explicit_limits: tuple[str, ...] = ()
    #: refuse Docker manifests that name an image already on the host (the hosting default)
    images_from_submission_only: bool = False
    #: ``--cross-check``: score each task's run with pytrec_eval and the coir policy too (grader.metrics.cross_check)
    cross_check: bool = False
    #: The key that blinds the ids a container sees; None: the one beside ``key_path``, else OUT's own
    #: (:func:`grader.grading.blinding_keys.blinding_key_for`).
    blinding_key: BlindingKey | Preblinded | None = None
    #: A hosted worker's folder for each task's ranking as a compact run (``<task>.run``, :mod:`grader.runs.compact`),
    #: written by :func:`grader.grading.ranking.rank_submission` (the server scores them); ``grader run`` writes none.
    runs_dir: Path | None = None
    #: ``grader run --dedup-aware``: called with each task's name, judgements and run (under the real ids) as it is
    #: scored; a stored result is then never reused (its run is not kept), every task is ranked again.
    run_observer: Callable[[str, Qrels, Run], None] | None = None
    #: sha256 of the grading machine's fingerprint, named in the report's ``cost`` block (the CLI computes it); None: unnamed
    fingerprint: str | None = None

    def effective_measures(self) -> tuple[Measure, ...]:
        """The benchmark's measures (or the defaults) with the primary one first."""
        spec = self.benchmark.spec
        chosen = self.measures or (tuple(parse_measure(m) for m in spec.measures) if spec.measures else default_measures())
        primary = parse_measure(spec.primary_measure)
        return (primary, *[m for m in chosen if m != primary])


@dataclass(frozen=True)
class TaskInputs:
    """The data of one task's split: the judgements stay on the host; documents and judged queries go to the grader."""

    task: Task
    qrels: Qrels
    documents: list[Document]
    queries: list[Query]


def load_task_inputs(task: Task, split: str) -> TaskInputs:
    """Read the split's judgements, the corpus and the judged queries."""
    qrels = task.qrels(split)
    documents = list(task.iter_corpus())
    queries = [query for query in task.iter_queries() if query.id in qrels]
    return TaskInputs(task, qrels, documents, queries)


@dataclass(frozen=True)
class Ranked:
    """A task's ranking, extra report fields, and (for embedding submissions) the vectors."""

    run: Run
    extra: dict[str, Any]
    query_vectors: np.ndarray | None = None
    corpus_vectors: np.ndarray | None = None

    @property
    def dimension(self) -> int | None:
        """The embedding dimension, for embedding submissions."""
        if self.corpus_vectors is not None:
            return int(self.corpus_vectors.shape[1])
        encoding = self.extra.get("encoding")
        return int(encoding["dimension"]) if isinstance(encoding, dict) and "dimension" in encoding else None


class TaskGrader(Protocol):
    """Ranks one task for one submission. Implementations: in-process ONNX, the ONNX runner image, submitted Docker images.

    :meth:`rank` raises :class:`grader.errors.TaskFailure` for the submission's faults (a failure code),
    :class:`grader.errors.SandboxUnavailable` for the infrastructure's.
    """

    def report(self) -> dict[str, Any]:
        """The ``sandbox`` section of the report: how the submission was run."""
        ...

    def rank(self, inputs: TaskInputs, options: RunOptions, progress: ProgressListener, *, keep_output: Path | None = None) -> Ranked:
        """The task's ranking. With ``keep_output``, a sandboxed backend copies what the container wrote there
        (before validating it) so that ``grader check`` can list every problem in it."""
        ...
