"""``grader run``: grade a submission over the tasks of a benchmark (the orchestration).

For each task: get a ranking from the task grader :mod:`grader.grading.backends`
picks (an ONNX encoder in a child process or in the runner image, or a Docker
image in ``retrieve`` or ``encode`` mode; the types are in
:mod:`grader.grading.interfaces`), score it, store the finished task (so a rerun
resumes), then assemble one report. A task that fails is recorded with its
failure code; the others still run.
"""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from grader import jsonio
from grader.errors import TASK_FAULT_TYPES, EngineLost, TaskFailure, UsageError, failure_code
from grader.failures import FailureCode
from grader.files import atomic_write_bytes
from grader.grading.backends import prepare_task_grader
from grader.grading.cost import TaskCost, cost_block, resumed_task
from grader.grading.energy import EnergyMeter
from grader.grading.interfaces import ProgressListener, RunOptions, TaskGrader, TaskInputs, load_task_inputs
from grader.grading.lock import locked_out_dir
from grader.grading.scoring import assemble_report, score_task
from grader.grading.store import Loaded, TaskStore
from grader.metrics.cross_check import cross_check
from grader.metrics.policy import evaluate
from grader.reports.assemble import failed_task, write_report
from grader.reports.signing import ENVELOPE_NAME, REPORT_NAME
from grader.retrieval.pca import reduce
from grader.retrieval.search import search_run
from grader.runs.compact import canonical_order, encode_run, has_ties
from grader.runs.run import Run
from grader.submissions.archive import open_submission
from grader.submissions.manifest import DockerManifest, load_manifest


def split_is_public(options: RunOptions) -> bool:
    """Whether the split being graded is the benchmark's public sample (not its hidden split)."""
    spec = options.benchmark.spec
    return options.split == spec.sample_split and spec.sample_split != spec.default_split


def fault_texts(error: BaseException, options: RunOptions) -> tuple[str, str | None]:
    """A task fault's message and container stderr as a report shows them (stderr only where the split is public)."""
    if isinstance(error, TaskFailure):
        return error.report_text(public=split_is_public(options))
    return str(error), None


def grade_task(
    grader: TaskGrader, inputs: TaskInputs, options: RunOptions, progress: ProgressListener, *, cost: TaskCost | None = None
) -> dict[str, Any]:
    """Rank and score one task; a submission's fault becomes a failed entry.

    With ``cost``, what the task cost is filled in (the report's ``cost`` block): what the
    task grader measured of its encoder (``last_cost``, where it keeps one), the wall time of
    scoring, the energy over the whole task. Whatever it holds, the entry does not change.
    """
    energy = EnergyMeter().start()
    try:
        return _grade_task(grader, inputs, options, progress, cost)
    finally:
        if cost is not None:
            cost.rank = getattr(grader, "last_cost", None)
            cost.energy = energy.stop()


def _grade_task(grader: TaskGrader, inputs: TaskInputs, options: RunOptions, progress: ProgressListener, cost: TaskCost | None) -> dict[str, Any]:
    task = inputs.task
    data_digest = task.split_digest(options.split)
    progress.task_started(task.name, documents=len(inputs.documents), queries=len(inputs.queries))
    try:
        ranked = grader.rank(inputs, options, progress)
    except EngineLost:
        raise  # no engine for any task: the run stops (exit 4); the tasks already stored resume
    except TASK_FAULT_TYPES as error:
        # One rule (grader.errors.failure_code) decides the code; an engine fault is INFRA and the other tasks still run.
        message, stderr = fault_texts(error, options)
        return failed_task(
            task.name,
            split=options.split,
            data_digest=data_digest,
            code=failure_code(error),
            message=message,
            stderr=stderr,
            judged=len(inputs.qrels),
        )
    measures = options.effective_measures()
    if options.run_observer is not None:
        options.run_observer(task.name, inputs.qrels, ranked.run)
    if options.cross_check:  # a disagreement stops the grade (CrossCheckError, exit 1)
        progress.note(cross_check(inputs.qrels, ranked.run, measures).summary(task.name))
    extra = dict(ranked.extra)
    if ranked.query_vectors is not None and ranked.corpus_vectors is not None:
        query_ids = list(ranked.run.query_ids)
        doc_ids = [d.id for d in inputs.documents]
        if options.keep_embeddings:
            save_embeddings(options.out_dir / "embeddings" / task.name, query_ids, doc_ids, ranked.query_vectors, ranked.corpus_vectors)
        if options.pca_dims:
            extra["pca"] = pca_results(inputs, query_ids, doc_ids, ranked.query_vectors, ranked.corpus_vectors, options)
    scoring = time.monotonic()
    entry = score_task(
        task.name,
        split=options.split,
        data_digest=data_digest,
        qrels=inputs.qrels,
        run=ranked.run,
        measures=measures,
        policy=options.policy,
        extra=extra,
    )
    if cost is not None:
        cost.score_s = time.monotonic() - scoring
    return entry


def save_compact_run(path: Path, run: Run, inputs: TaskInputs, depth: int) -> None:
    """Write ``run`` as a compact run over the task's canonical corpus and judged-query orders (:mod:`grader.runs.compact`)."""
    corpus = canonical_order([document.id for document in inputs.documents])
    queries = canonical_order([query.id for query in inputs.queries])
    path.parent.mkdir(parents=True, exist_ok=True)
    # Scores only where a tie needs them: the server re-sorts the ranking under the real ids (grader.runs.compact.has_ties).
    atomic_write_bytes(path, encode_run(run, corpus=corpus, queries=queries, depth=depth, scores=has_ties(run)))


def pca_results(
    inputs: TaskInputs, query_ids: list[str], doc_ids: list[str], queries: np.ndarray, corpus: np.ndarray, options: RunOptions
) -> dict[str, Any]:
    """Measures at each PCA dimension: separate, labelled results, never averaged together."""
    results: dict[str, Any] = {}
    for dimension in options.pca_dims:
        projection = reduce(queries, corpus, dimension)
        run = search_run(query_ids, doc_ids, projection.queries, projection.corpus, options.top_k, fault_code=FailureCode.MODEL_ERROR)
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


def _resumable(entry: dict[str, Any]) -> bool:
    """Whether a finished task may be stored for resuming: a platform fault is graded again by the next run."""
    failure = entry.get("failure")
    return failure is None or FailureCode(failure["code"]).charged


def _embeddings_kept(out_dir: Path, task: str) -> bool:
    folder = out_dir / "embeddings" / task
    return all((folder / name).is_file() for name in ("queries.npy", "corpus.npy", "ids.json"))


def grade_submission(submission: Path, options: RunOptions, progress: ProgressListener) -> tuple[dict[str, Any], Path]:
    """Grade ``submission`` on ``options.tasks``; write the report; return it and its path.

    ``options.out_dir`` is locked for the whole run (:mod:`grader.grading.lock`):
    a second run on the same folder stops at once, having written nothing.
    """
    with locked_out_dir(options.out_dir):
        return _grade_submission(submission, options, progress)


def _grade_submission(submission: Path, options: RunOptions, progress: ProgressListener) -> tuple[dict[str, Any], Path]:
    started_at = datetime.now(UTC)
    authenticator = None
    if options.key_path is not None:
        from grader.grading.store_auth import authenticator_from_key

        authenticator = authenticator_from_key(options.key_path)
    store = TaskStore(options.out_dir, authenticator)
    measures = options.effective_measures()
    with open_submission(submission) as folder:
        manifest = load_manifest(folder)
        if (options.pca_dims or options.keep_embeddings) and isinstance(manifest, DockerManifest) and manifest.mode != "encode":
            raise UsageError("--pca-dims and --keep-embeddings need an embedding submission (ONNX, or a Docker image in encode mode)")
        prepared = prepare_task_grader(folder, manifest, options)
        if options.sandbox == "auto":
            progress.note(f"sandbox: {prepared.sandbox} ({prepared.why})")
        grader, subject, digest = prepared.grader, prepared.subject, prepared.digest
        sandbox_report = grader.report()
        entries: list[dict[str, Any]] = []
        costs: dict[str, dict[str, Any]] = {}
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
            # A run observer (--dedup-aware) needs every task's run, which the store does not keep: rank each again.
            found = store.lookup(name, key) if options.run_observer is None else Loaded(None)
            entry = found.entry
            if entry is not None and options.keep_embeddings and entry.get("status") == "scored" and not _embeddings_kept(options.out_dir, name):
                entry, found = None, Loaded(None, "its embeddings are missing from OUT/embeddings")
            if found.rejected is not None:
                progress.note(f"{name}: stored result not reused ({found.rejected}); grading again")
            resumed = entry is not None
            if entry is None:
                inputs = load_task_inputs(task, options.split)
                cost = TaskCost(texts=len(inputs.documents) + len(inputs.queries), queries=len(inputs.queries))
                entry = grade_task(grader, inputs, options, progress, cost=cost)
                costs[name] = cost.as_json()
                if _resumable(entry):
                    store.save(name, key, entry)
            else:
                costs[name] = resumed_task()
            entries.append({"name": name, **entry})
            progress.task_finished(name, entry, resumed=resumed)
    progress.finish()
    report = assemble_report(
        options.benchmark,
        entries,
        tasks=options.tasks,
        measures=measures,
        policy=options.policy,
        subject=subject,
        sandbox=sandbox_report,
        labels=manifest.training.as_labels(),
        started_at=started_at,
        finished_at=datetime.now(UTC),
        top_k=options.top_k,
        cost=cost_block(costs, source="grader", fingerprint=options.fingerprint),
    )
    if options.key_path is not None:
        path = write_report(report, options.out_dir / ENVELOPE_NAME, options.key_path)
    else:
        path = write_report(report, options.out_dir / REPORT_NAME, None)
    return report, path
