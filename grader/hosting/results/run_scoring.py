"""The server scores what workers return: compact runs put apart, scored in a bounded child, before acceptance.

A worker puts each ranked task's compact run (:mod:`grader.runs.compact`) with
:func:`run_slot` (only the holder of the attempt's lease, only the job's tasks, each
held to its task's size bound), then posts its result: the facts of the grade and
the sha256 of each run, signed. :func:`score` takes the result once its lease and
signature were checked (:func:`grader.hosting.results.recording.verify`), checks each
stored run against its posted digest, and scores the runs against the judgements in a
separate memory-bounded process (:func:`grader.grading.score_process.score_in_child`),
holding no database transaction meanwhile. The report it makes, parsed once, is the
only one acceptance (:func:`grader.hosting.results.recording.accept_result`) ever
stores and signs: a worker has no field to post a score in. A run that is refused (outside the corpus,
a document twice, past the depth, a query not staged, other bytes than signed) makes
the attempt a platform failure (``INFRA``): the job goes back to the queue.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.errors import ReportError, TaskFailure
from grader.files import atomic_write_bytes
from grader.grading.score_process import score_in_child
from grader.hosting.config import DEPTH
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Submission
from grader.hosting.keyring.files import KeyFiles
from grader.hosting.queue.lifecycle import holds_lease
from grader.hosting.results import ranking_record
from grader.hosting.results.recording import AuthenticResult, Grading, ScoredResult
from grader.hosting.storage import StateDir
from grader.metrics.policy_name import Policy

#: The policy hosted grades are scored under (``grader run``'s default): it reads only the order of a run.
HOSTED_POLICY = Policy.STRICT


def run_slot(ctx: ServerContext, worker_id: int, submission_id: str, attempt: int, task: str) -> tuple[Path, int] | None:
    """Where ``worker_id`` may put the compact run of ``task`` for this attempt, and its size bound; None when it holds no lease or the job has no such task."""
    if task not in ctx.tasks or len(submission_id) > 40:
        return None
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
        if submission is None or not holds_lease(submission, attempt, worker_id):
            return None
        split = submission.split
    cap = ctx.run_body_bytes.get((task, split))
    if cap is None:
        return None
    folder = ctx.state.runs_dir(submission_id, attempt)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{task}.run", cap


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def scoring_job(
    benchmark_target: str,
    split: str,
    tasks: list[str],
    facts: dict[str, Any],
    runs: dict[str, str],
    *,
    blinding_key_file: Path | None,
    kept_documents: Path | None = None,
    training_sketch: tuple[Path, str] | None = None,
) -> dict[str, Any]:
    """The job a scoring process takes (:func:`grader.grading.score_process.score_in_child`): acceptance and ``--rescore`` alike.

    ``blinding_key_file``: the competition's key, whose pseudonyms the runs index (the key itself never travels in a job);
    ``kept_documents``: the state's folder where each task's documents under that key are kept, so that a grade does
    not read and blind the whole corpus again (:mod:`grader.grading.blinded_documents`).
    ``training_sketch``: the sketch a hidden-track submission carried and the SHA-256 intake recorded of it; its
    released audit joins the report (a file with another digest fails the scoring: ``INFRA``).
    """
    return {
        "training_sketch": None if training_sketch is None else str(training_sketch[0]),
        "training_sketch_sha256": None if training_sketch is None else training_sketch[1],
        "benchmark": benchmark_target,
        "split": split,
        "tasks": list(tasks),
        "facts": facts,
        "runs": runs,
        "top_k": DEPTH,
        "policy": HOSTED_POLICY.value,
        "blinding_key_file": None if blinding_key_file is None else str(blinding_key_file),
        "kept_documents": None if kept_documents is None else str(kept_documents),
    }


def training_sketch(state: StateDir, grading: Grading) -> tuple[Path, str] | None:
    """The sketch a hidden-track grade's submission carried (kept at intake) and the digest intake recorded, or None.

    Only a hidden grade has one: the figures are about the hidden split, the one a participant cannot read.
    """
    if grading.sketch_sha256 is None:
        return None
    return state.sketch_path(grading.submission_id), grading.sketch_sha256


def score(ctx: ServerContext, authentic: AuthenticResult) -> ScoredResult:
    """The report the server scored from ``authentic``'s runs, or an ``INFRA`` failure why none could be; called outside any transaction.

    A whole-grade failure (or a result without facts) has no runs to score: it comes back as posted (acceptance judges it).
    """
    grading, posted = authentic.grading, authentic.posted
    if posted.failure_code is not None or posted.facts is None:
        return ScoredResult.unscored(authentic)
    folder = ctx.state.runs_dir(grading.submission_id, grading.attempt)
    runs: dict[str, str] = {}
    for task, digest in posted.runs.items():
        path = folder / f"{task}.run"
        if task not in ctx.tasks or not path.is_file() or _sha256(path) != digest:
            return ScoredResult.runs_refused(authentic, f"task {task}: the stored run is missing or is not the one the worker signed")
        runs[task] = str(path)
    # Kept beside the runs: with them, a later re-scoring needs nothing from the worker.
    atomic_write_bytes(folder / "facts.json", jsonio.dumps(posted.facts, ensure_ascii=True).encode("ascii"))
    ranking_record.record(folder, ctx.benchmark_target, ctx.tasks, grading.split)  # what the runs index: a re-scoring checks it
    # The runs index the workers' pseudonymous copy: the child maps them back with the key (read from its file).
    key_file = None if ctx.blinding_key is None else KeyFiles(ctx.state.keys).blinding_secret
    job = scoring_job(
        ctx.benchmark_target,
        grading.split,
        ctx.tasks,
        posted.facts,
        runs,
        blinding_key_file=key_file,
        kept_documents=ctx.state.blinded_documents,
        training_sketch=training_sketch(ctx.state, grading),
    )
    try:
        report = score_in_child(job)
    except (TaskFailure, ReportError) as error:
        return ScoredResult.runs_refused(authentic, error.detail if isinstance(error, TaskFailure) else str(error))
    return ScoredResult.of_report(authentic, report)
