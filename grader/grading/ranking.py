"""Ranking without the judgements: what a hosted worker does: it never holds the judgements.

A worker holds the server's pseudonymous copy of the data (``grader admin
export-worker-data``) and is given, per task, the pseudonyms of the judged queries
(staging needs them); never the judgements, the real ids or the blinding key. Its
options carry :class:`grader.sandbox.blinding.Preblinded`, so the copy is staged as it
is and the runs index the copy's canonical order (the server maps them back).
:func:`rank_submission` runs each task's ranking exactly as
``grader run`` does (:func:`grader.grading.backends.prepare_task_grader`, the same
sandbox and collect stages), writes each ranking as a compact run
(:func:`grader.grading.runner.save_compact_run`), and returns the facts of the grade
(:func:`grader.grading.scoring.facts_of`'s shape: subject, sandbox, labels, timings,
task failures) for the server, which scores the runs against the judgements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.data.qrels import Qrels
from grader.data.task import Query, Task
from grader.errors import TASK_FAULT_TYPES, UsageError, failure_code
from grader.grading.backends import prepare_task_grader
from grader.grading.cost import TaskCost, cost_block
from grader.grading.energy import EnergyMeter
from grader.grading.interfaces import ProgressListener, RunOptions, TaskGrader, TaskInputs
from grader.grading.lock import locked_out_dir
from grader.grading.runner import fault_texts, save_compact_run
from grader.reports.model import format_timestamp
from grader.reports.pieces import Failure
from grader.submissions.archive import open_submission
from grader.submissions.manifest import load_manifest

#: Why a worker's cost block has no scoring time: the server, which alone holds the judgements, scores.
SCORED_BY_THE_SERVER = "the server scores the run, not the worker"


def judged_queries(task: Task, judged: Sequence[str]) -> list[Query]:
    """The ``judged`` queries of ``task`` in file order, the corpus unread (a query id not in the data is the data's fault)."""
    wanted = set(judged)
    queries = [query for query in task.iter_queries() if query.id in wanted]
    if len(queries) != len(wanted):
        raise UsageError(f"task {task.name}: {len(wanted) - len(queries)} judged query id(s) of the job are not in this worker's queries")
    return queries


def ranking_inputs(task: Task, judged: Sequence[str]) -> TaskInputs:
    """The corpus and the ``judged`` queries of ``task``, without judgements (a query id not in the data is the data's fault)."""
    queries = judged_queries(task, judged)
    return TaskInputs(task, Qrels({}), list(task.iter_corpus()), queries)


def rank_task(
    grader: TaskGrader, inputs: TaskInputs, options: RunOptions, progress: ProgressListener, *, cost: TaskCost | None = None
) -> dict[str, Any]:
    """Rank one task and write its compact run; its facts (``failure``, ``encoding``), a submission's fault a failure.

    With ``cost``, what ranking cost is filled in (as :func:`grader.grading.runner.grade_task` does; the server scores).
    """
    energy = EnergyMeter().start()
    try:
        return _rank_task(grader, inputs, options, progress)
    finally:
        if cost is not None:
            cost.rank = getattr(grader, "last_cost", None)
            cost.energy = energy.stop()


def _rank_task(grader: TaskGrader, inputs: TaskInputs, options: RunOptions, progress: ProgressListener) -> dict[str, Any]:
    assert options.runs_dir is not None
    name = inputs.task.name
    progress.task_started(name, documents=len(inputs.documents), queries=len(inputs.queries))
    try:
        ranked = grader.rank(inputs, options, progress)
    except TASK_FAULT_TYPES as error:
        message, stderr = fault_texts(error, options)
        return {"failure": Failure(failure_code(error), message, stderr).as_json()}
    save_compact_run(options.runs_dir / f"{name}.run", ranked.run, inputs, options.top_k)
    encoding = ranked.extra.get("encoding")
    return {"failure": None, **({"encoding": encoding} if encoding else {})}


def rank_submission(submission: Path, options: RunOptions, judged: Mapping[str, Sequence[str]], progress: ProgressListener) -> dict[str, Any]:
    """Rank ``submission`` on ``options.tasks`` (judged query ids from ``judged``); write the runs to ``options.runs_dir``; return the facts."""
    if options.runs_dir is None:
        raise UsageError("ranking without judgements needs a folder for the runs")
    started_at = datetime.now(UTC)
    tasks: dict[str, Any] = {}
    costs: dict[str, Any] = {}
    with locked_out_dir(options.out_dir), open_submission(submission) as folder:
        manifest = load_manifest(folder)
        prepared = prepare_task_grader(folder, manifest, options)
        for name in options.tasks:
            if name not in judged:
                raise UsageError(f"the job names no judged queries for task {name}")
            inputs = ranking_inputs(options.benchmark.task(name), judged[name])
            cost = TaskCost(len(inputs.documents) + len(inputs.queries), len(inputs.queries), missing={"score_s": SCORED_BY_THE_SERVER})
            tasks[name] = rank_task(prepared.grader, inputs, options, progress, cost=cost)
            costs[name] = cost.as_json()
            progress.task_finished(name, {"status": "failed" if tasks[name]["failure"] else "ranked", **tasks[name]}, resumed=False)
        sandbox = prepared.grader.report()
    progress.finish()
    return {
        "subject": prepared.subject,
        "sandbox": sandbox,
        "labels": manifest.training.as_labels(),
        "started_at": format_timestamp(started_at),
        "finished_at": format_timestamp(datetime.now(UTC)),
        "tasks": tasks,
        # The worker's word on what ranking cost it: the server checks it and names the machine (grader.grading.worker_cost).
        "cost": cost_block(costs, source="worker"),
    }
