"""``grader run``: grade a submission over the tasks of a benchmark.

For each task: encode the corpus and the judged queries of the split, search,
score, store the finished task (so a rerun resumes), then assemble one report.
A task that fails is recorded with its failure code; the others still run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from grader.data.benchmark import Benchmark
from grader.data.task import Task
from grader.errors import SubmissionError, UsageError
from grader.grading.store import TaskStore
from grader.metrics.measures import Measure, default_measures, parse_measure
from grader.metrics.policy import Policy, evaluate
from grader.reports.assemble import failed_task, scored_task, write_report
from grader.reports.model import build_report
from grader.reports.signing import ENVELOPE_NAME, REPORT_NAME
from grader.retrieval.encoder import OnnxEncoder
from grader.retrieval.search import exact_top_k, rankings_to_run
from grader.submissions.archive import open_submission
from grader.submissions.digest import submission_digest
from grader.submissions.manifest import OnnxManifest, load_manifest


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

    def effective_measures(self) -> tuple[Measure, ...]:
        """The benchmark's measures (or the defaults) with the primary one first."""
        spec = self.benchmark.spec
        chosen = self.measures or (tuple(parse_measure(m) for m in spec.measures) if spec.measures else default_measures())
        primary = parse_measure(spec.primary_measure)
        return (primary, *[m for m in chosen if m != primary])


def document_text(title: str, text: str) -> str:
    """A document as BEIR's dense models see it: ``title + " " + text``, stripped."""
    return (title + " " + text).strip()


def grade_onnx_task(encoder: OnnxEncoder, task: Task, options: RunOptions, reporter: Reporter) -> dict[str, Any]:
    """Encode, search and score one task; returns its report entry."""
    qrels = task.qrels(options.split)
    documents = list(task.iter_corpus())
    queries = [query for query in task.iter_queries() if query.id in qrels]
    reporter.task_started(task.name, documents=len(documents), queries=len(queries))
    manifest = encoder.manifest
    corpus_vectors, corpus_stats = encoder.encode(
        [document_text(d.title, d.text) for d in documents],
        prefix=manifest.document_prefix,
        progress=reporter.progress(f"{task.name}: corpus", len(documents)),
    )
    query_vectors, query_stats = encoder.encode(
        [q.text for q in queries],
        prefix=manifest.query_prefix,
        progress=reporter.progress(f"{task.name}: queries", len(queries)),
    )
    scores, indices = exact_top_k(query_vectors, corpus_vectors, options.top_k)
    run = rankings_to_run([q.id for q in queries], [d.id for d in documents], scores, indices)
    evaluation = evaluate(qrels, run, options.effective_measures(), options.policy)
    return scored_task(
        task.name,
        split=options.split,
        data_digest=task.split_digest(options.split),
        evaluation=evaluation,
        extra={"encoding": {"queries": query_stats.as_dict(), "corpus": corpus_stats.as_dict(), "dimension": encoder.dimension}},
    )


def grade_submission(submission: Path, options: RunOptions, reporter: Reporter) -> tuple[dict[str, Any], Path]:
    """Grade ``submission`` on ``options.tasks``; write the report; return it and its path."""
    started_at = datetime.now(timezone.utc)
    store = TaskStore(options.out_dir)
    measures = options.effective_measures()
    with open_submission(submission) as folder:
        manifest = load_manifest(folder)
        if not isinstance(manifest, OnnxManifest):
            raise UsageError("Docker image submissions need the Docker sandbox, which this grader does not have yet (use an ONNX submission)")
        digest = submission_digest(folder)
        encoder = OnnxEncoder.load(folder, manifest, threads=options.threads)
        entries: list[dict[str, Any]] = []
        for name in options.tasks:
            task = options.benchmark.task(name)
            data_digest = task.split_digest(options.split)
            key = TaskStore.key(
                submission=digest,
                task=name,
                data=data_digest,
                split=options.split,
                policy=options.policy.value,
                measures=[str(m) for m in measures],
                top_k=options.top_k,
            )
            entry = store.load(name, key)
            resumed = entry is not None
            if entry is None:
                try:
                    entry = grade_onnx_task(encoder, task, options, reporter)
                except SubmissionError as error:
                    entry = failed_task(name, split=options.split, data_digest=data_digest, code="MODEL_ERROR", message=str(error), judged=len(task.qrels(options.split)))
                store.save(name, key, entry)
            entries.append({"name": name, **entry})
            reporter.task_finished(name, entry, resumed=resumed)
    reporter.finish()
    primary = str(measures[0])
    task_scores = {e["name"]: (e["measures"][primary] if e["status"] == "scored" else None) for e in entries}
    report = build_report(
        benchmark={"name": options.benchmark.name, "version": options.benchmark.spec.version, "primary_measure": primary},
        subject={"kind": "onnx", "name": manifest.name, "digest": {"sha256": digest}},
        tasks=entries,
        aggregate=options.benchmark.spec.aggregate(task_scores, tasks=options.tasks),
        policy=options.policy.value,
        started_at=started_at,
        finished_at=datetime.now(timezone.utc),
        sandbox={"kind": "none", "threads": options.threads},
        labels=manifest.training.as_labels(),
    )
    if options.key_path is not None:
        path = write_report(report, options.out_dir / ENVELOPE_NAME, options.key_path)
    else:
        path = write_report(report, options.out_dir / REPORT_NAME, None)
    return report, path
