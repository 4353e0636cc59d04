"""``grader run``: grade a submission over the tasks of a benchmark.

For each task: get a ranking from the submission (an ONNX encoder in-process or
in the runner image, or a Docker image in ``retrieve`` or ``encode`` mode), score
it, store the finished task (so a rerun resumes), then assemble one report. A
task that fails is recorded with its failure code; the others still run.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from grader import jsonio
from grader.data.benchmark import Benchmark
from grader.data.task import Document, Query, Task
from grader.errors import SandboxUnavailable, SubmissionError, TaskFailure, UsageError
from grader.failures import FailureCode
from grader.grading.lock import locked_out_dir
from grader.grading.store import TaskStore
from grader.metrics.measures import Measure, default_measures, parse_measure
from grader.metrics.policy import Policy, evaluate
from grader.reports.assemble import failed_task, scored_task, write_report
from grader.reports.model import build_report
from grader.reports.signing import ENVELOPE_NAME, REPORT_NAME
from grader.retrieval.encoder import OnnxEncoder
from grader.retrieval.pca import reduce
from grader.retrieval.search import search_run
from grader.files import atomic_write_bytes
from grader.runs.run import Run
from grader.sandbox.limits import SandboxLimits
from grader.submissions.archive import open_submission
from grader.submissions.digest import submission_digest
from grader.submissions.manifest import DockerManifest, Manifest, OnnxManifest, load_manifest

RUNNER_IMAGE = os.environ.get("GRADER_RUNNER_IMAGE", "grader-runner:dev")


class Reporter(Protocol):
    """What the grading loop tells a person while it works (the CLI prints it to stderr)."""

    def task_started(self, task: str, *, documents: int, queries: int) -> None: ...

    def task_finished(self, task: str, entry: dict[str, Any], *, resumed: bool) -> None: ...

    def progress(self, label: str, total: int) -> Callable[[int], None]: ...

    def finish(self) -> None: ...


@dataclass(frozen=True)
class RunOptions:
    """Everything ``grader run`` was asked to do."""

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

    def effective_measures(self) -> tuple[Measure, ...]:
        """The benchmark's measures (or the defaults) with the primary one first."""
        spec = self.benchmark.spec
        chosen = self.measures or (tuple(parse_measure(m) for m in spec.measures) if spec.measures else default_measures())
        primary = parse_measure(spec.primary_measure)
        return (primary, *[m for m in chosen if m != primary])


def document_text(title: str, text: str) -> str:
    """A document as BEIR's dense models see it: ``title + " " + text``, stripped."""
    return (title + " " + text).strip()


@dataclass(frozen=True)
class TaskInputs:
    """The data of one task's split."""

    task: Task
    qrels: Any
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
    """A task's run, extra report fields, and (for embedding submissions) the vectors."""

    run: Run
    extra: dict[str, Any]
    query_vectors: np.ndarray | None = None
    corpus_vectors: np.ndarray | None = None


class TaskGrader(Protocol):
    """Produces one task's run (and optional extra report fields) from a submission."""

    def rank(self, inputs: TaskInputs, options: RunOptions, reporter: Reporter) -> Ranked: ...


class InProcessOnnx:
    """An ONNX encoder run inside the grader's own process (``--sandbox none``)."""

    def __init__(self, folder: Path, manifest: OnnxManifest, threads: int) -> None:
        self.encoder = OnnxEncoder.load(folder, manifest, threads=threads)

    def rank(self, inputs: TaskInputs, options: RunOptions, reporter: Reporter) -> Ranked:
        manifest = self.encoder.manifest
        name = inputs.task.name
        corpus, corpus_stats = self.encoder.encode(
            [document_text(d.title, d.text) for d in inputs.documents],
            prefix=manifest.document_prefix,
            progress=reporter.progress(f"{name}: corpus", len(inputs.documents)),
        )
        queries, query_stats = self.encoder.encode(
            [q.text for q in inputs.queries],
            prefix=manifest.query_prefix,
            progress=reporter.progress(f"{name}: queries", len(inputs.queries)),
        )
        run = search_run([q.id for q in inputs.queries], [d.id for d in inputs.documents], queries, corpus, options.top_k, fault_code="MODEL_ERROR")
        encoding = {"queries": query_stats.as_dict(), "corpus": corpus_stats.as_dict(), "dimension": self.encoder.dimension}
        return Ranked(run, {"encoding": encoding}, queries, corpus)


def split_is_public(options: RunOptions) -> bool:
    """Whether the split being graded is the benchmark's public sample (not its hidden split)."""
    spec = options.benchmark.spec
    return options.split == spec.sample_split and spec.sample_split != spec.default_split


def grade_task(grader: TaskGrader, inputs: TaskInputs, options: RunOptions, reporter: Reporter) -> dict[str, Any]:
    """Rank and score one task; a submission's fault becomes a failed entry."""
    task = inputs.task
    data_digest = task.split_digest(options.split)
    reporter.task_started(task.name, documents=len(inputs.documents), queries=len(inputs.queries))
    try:
        ranked = grader.rank(inputs, options, reporter)
    except TaskFailure as failure:
        message, stderr = failure.report_text(public=split_is_public(options))
        return failed_task(task.name, split=options.split, data_digest=data_digest, code=failure.code, message=message, stderr=stderr, judged=len(inputs.qrels))
    except SubmissionError as error:
        return failed_task(task.name, split=options.split, data_digest=data_digest, code=FailureCode.MODEL_ERROR, message=str(error), judged=len(inputs.qrels))
    except SandboxUnavailable as error:
        # The engine's fault, not the submission's: this task is INFRA, the others still run.
        return failed_task(task.name, split=options.split, data_digest=data_digest, code=FailureCode.INFRA, message=str(error), judged=len(inputs.qrels))
    measures = options.effective_measures()
    evaluation = evaluate(inputs.qrels, ranked.run, measures, options.policy)
    extra = dict(ranked.extra)
    if ranked.query_vectors is not None and ranked.corpus_vectors is not None:
        query_ids = list(ranked.run.query_ids)
        doc_ids = [d.id for d in inputs.documents]
        if options.keep_embeddings:
            save_embeddings(options.out_dir / "embeddings" / task.name, query_ids, doc_ids, ranked.query_vectors, ranked.corpus_vectors)
        if options.pca_dims:
            extra["pca"] = pca_results(inputs, query_ids, doc_ids, ranked.query_vectors, ranked.corpus_vectors, options)
    return scored_task(task.name, split=options.split, data_digest=data_digest, evaluation=evaluation, extra=extra)


def pca_results(inputs: TaskInputs, query_ids: list[str], doc_ids: list[str], queries: np.ndarray, corpus: np.ndarray, options: RunOptions) -> dict[str, Any]:
    """Measures at each PCA dimension: separate, labelled results, never averaged together."""
    results: dict[str, Any] = {}
    for dimension in options.pca_dims:
        projection = reduce(queries, corpus, dimension)
        run = search_run(query_ids, doc_ids, projection.queries, projection.corpus, options.top_k, fault_code="MODEL_ERROR")
        evaluation = evaluate(inputs.qrels, run, options.effective_measures(), options.policy)
        results[str(dimension)] = {
            "applied": projection.applied,
            "explained_variance": projection.explained_variance,
            "measures": evaluation.means(),
        }
    return results


def save_embeddings(folder: Path, query_ids: list[str], doc_ids: list[str], queries: np.ndarray, corpus: np.ndarray) -> None:
    """Keep a task's embeddings (float32 .npy plus the ids, in row order) for ``grader effect``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in (("queries.npy", queries), ("corpus.npy", corpus)):
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False)
        atomic_write_bytes(folder / name, buffer.getvalue())
    jsonio.write_json(folder / "ids.json", {"queries": query_ids, "corpus": doc_ids}, indent=None)


def resolve_sandbox(requested: str, manifest: Manifest) -> str:
    """``docker`` or ``none``: what will actually isolate this submission."""
    return choose_sandbox(requested, manifest)[0]


def choose_sandbox(requested: str, manifest: Manifest) -> tuple[str, str]:
    """``docker`` or ``none``, and why (what ``auto`` says on stderr)."""
    from grader.sandbox.engine import engine_available

    if isinstance(manifest, DockerManifest):
        if requested == "none":
            raise UsageError("a Docker image submission can only run in the Docker sandbox (--sandbox docker or auto)")
        return "docker", "a Docker image submission runs in the Docker sandbox"
    if requested == "auto":
        if not engine_available():
            return "none", "no Docker engine answers; the ONNX encoder runs in a child process, NOT isolated (time and memory limits still apply)"
        if not _image_present(RUNNER_IMAGE):
            return "none", f"the runner image {RUNNER_IMAGE} is missing (build it with `make images`); the ONNX encoder runs in a child process, NOT isolated"
        return "docker", f"a Docker engine answers and the runner image {RUNNER_IMAGE} is present"
    return requested, f"--sandbox {requested} was asked for"


def _image_present(reference: str) -> bool:
    from grader.sandbox.engine import docker_client

    try:
        docker_client().images.get(reference)
    except Exception:
        return False
    return True


def _note(reporter: Reporter, text: str) -> None:
    note = getattr(reporter, "note", None)
    if callable(note):
        note(text)


def _embeddings_kept(out_dir: Path, task: str) -> bool:
    folder = out_dir / "embeddings" / task
    return all((folder / name).is_file() for name in ("queries.npy", "corpus.npy", "ids.json"))


def grade_submission(submission: Path, options: RunOptions, reporter: Reporter) -> tuple[dict[str, Any], Path]:
    """Grade ``submission`` on ``options.tasks``; write the report; return it and its path.

    ``options.out_dir`` is locked for the whole run (:mod:`grader.grading.lock`):
    a second run on the same folder stops at once, having written nothing.
    """
    with locked_out_dir(options.out_dir):
        return _grade_submission(submission, options, reporter)


def _grade_submission(submission: Path, options: RunOptions, reporter: Reporter) -> tuple[dict[str, Any], Path]:
    started_at = datetime.now(UTC)
    authenticator = None
    if options.key_path is not None:
        from grader.grading.store_auth import authenticator_from_key

        authenticator = authenticator_from_key(options.key_path)
    store = TaskStore(options.out_dir, authenticator)
    measures = options.effective_measures()
    with open_submission(submission) as folder:
        manifest = load_manifest(folder)
        sandbox_kind, why = choose_sandbox(options.sandbox, manifest)
        if options.sandbox == "auto":
            _note(reporter, f"sandbox: {sandbox_kind} ({why})")
        if sandbox_kind == "none" and "--runtime" in options.explicit_limits:
            raise UsageError("--runtime: only the Docker sandbox can honour this; in-process grading enforces --time-limit, --memory and --cpus")
        if (options.pca_dims or options.keep_embeddings) and isinstance(manifest, DockerManifest) and manifest.mode != "encode":
            raise UsageError("--pca-dims and --keep-embeddings need an embedding submission (ONNX, or a Docker image in encode mode)")
        digest = submission_digest(folder)
        subject: dict[str, Any] = {"kind": "onnx", "name": manifest.name, "digest": {"sha256": digest}}
        grader: TaskGrader
        if sandbox_kind == "docker":
            from grader.grading.sandboxed import DockerTaskGrader

            docker_grader = DockerTaskGrader.prepare(folder, manifest, options, runner_image=RUNNER_IMAGE)
            grader = docker_grader
            sandbox_report = docker_grader.report()
            if isinstance(manifest, DockerManifest):
                digest = docker_grader.image.digest
                subject = {"kind": "docker-image", "name": manifest.name, "digest": {"sha256": digest}, "image": manifest.image, "mode": manifest.mode}
        elif isinstance(manifest, OnnxManifest):
            from grader.grading.inprocess import ChildProcessOnnx

            child_grader = ChildProcessOnnx(folder, manifest, options.threads, options.limits, pin_cpus="--cpus" in options.explicit_limits)
            grader = child_grader
            sandbox_report = child_grader.report()
        else:  # pragma: no cover - resolve_sandbox refuses Docker manifests without Docker
            raise UsageError("a Docker image submission needs the Docker sandbox")
        entries: list[dict[str, Any]] = []
        for name in options.tasks:
            task = options.benchmark.task(name)
            # Everything a task's stored result depends on; the sandbox report carries the limits and image.
            key = TaskStore.key(
                submission=digest,
                task=name,
                data=task.split_digest(options.split),
                split=options.split,
                policy=options.policy.value,
                measures=[str(m) for m in measures],
                top_k=options.top_k,
                sandbox=sandbox_report,
                pca_dims=list(options.pca_dims),
                keep_embeddings=options.keep_embeddings,
            )
            found = store.lookup(name, key)
            entry = found.entry
            if entry is not None and options.keep_embeddings and entry.get("status") == "scored" and not _embeddings_kept(options.out_dir, name):
                entry, found = None, type(found)(None, "its embeddings are missing from OUT/embeddings")
            if found.rejected is not None:
                _note(reporter, f"{name}: stored result not reused ({found.rejected}); grading again")
            resumed = entry is not None
            if entry is None:
                entry = grade_task(grader, load_task_inputs(task, options.split), options, reporter)
                if (entry.get("failure") or {}).get("code") != "INFRA":  # an engine fault is retried by the next run, not resumed
                    store.save(name, key, entry)
            entries.append({"name": name, **entry})
            reporter.task_finished(name, entry, resumed=resumed)
    reporter.finish()
    primary = str(measures[0])
    task_scores = {e["name"]: (e["measures"][primary] if e["status"] == "scored" else None) for e in entries}
    report = build_report(
        benchmark={"name": options.benchmark.name, "version": options.benchmark.spec.version, "primary_measure": primary},
        subject=subject,
        tasks=entries,
        aggregate=options.benchmark.spec.aggregate(task_scores, tasks=options.tasks),
        policy=options.policy.value,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        sandbox=sandbox_report,
        labels=manifest.training.as_labels(),
    )
    if options.key_path is not None:
        path = write_report(report, options.out_dir / ENVELOPE_NAME, options.key_path)
    else:
        path = write_report(report, options.out_dir / REPORT_NAME, None)
    return report, path

