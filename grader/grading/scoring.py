"""Scoring a ranking against the judgements into a report: the one path of ``grader run`` and of the server.

``grader run`` ranks and scores in one process (:mod:`grader.grading.runner` calls
:func:`score_task` and :func:`assemble_report`). A hosted worker ranks only: it returns
each task's run in the compact form (:mod:`grader.runs.compact`) and the facts of its
grade that are not scores (:func:`facts_of`: subject, sandbox, timings, task failures).
The server, which alone holds the judgements, rebuilds the report with
:func:`report_from_runs`, through the very same :func:`score_task` and
:func:`assemble_report`; so a served report's measures equal a direct run's bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.collect.unblind import unblind_run
from grader.data.benchmark import Benchmark
from grader.data.qrels import Qrels
from grader.data.task import Task
from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.grading.blinded_documents import blinded_documents
from grader.grading.cost import fingerprint_digest
from grader.grading.worker_cost import checked_worker_cost
from grader.metrics.measures import Measure
from grader.metrics.policy import Policy, evaluate
from grader.reports.assemble import failed_task, scored_task
from grader.reports.model import build_report
from grader.runs.compact import CompactRun, canonical_order, decode_run
from grader.runs.run import Run
from grader.runs.ties import cut_at_depth, overflowing
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindedIds, BlindingKey, blind

#: The fields of a task's report entry a worker may state (the rest are scores, counts and digests: the server's).
TASK_FACTS = ("encoding",)
#: The fields of a report a worker states (not the benchmark, policy, ranking depth or aggregate: the server's).
#: A worker's facts may carry ``cost`` too, its word on what ranking cost it (:func:`grader.grading.ranking.rank_submission`),
#: which the server checks (:mod:`grader.grading.worker_cost`) before the report carries it.
REPORT_FACTS = ("subject", "sandbox", "labels", "started_at", "finished_at")


def score_task(
    name: str,
    *,
    split: str,
    data_digest: str,
    qrels: Qrels,
    run: Run,
    measures: Sequence[Measure],
    policy: Policy,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report entry of a task whose ranking ``run`` is scored against ``qrels``."""
    evaluation = evaluate(qrels, run, measures, policy)
    return scored_task(name, split=split, data_digest=data_digest, evaluation=evaluation, run=run, extra=extra)


def assemble_report(
    benchmark: Benchmark,
    entries: list[dict[str, Any]],
    *,
    tasks: Sequence[str],
    measures: Sequence[Measure],
    policy: Policy,
    subject: dict[str, Any],
    sandbox: dict[str, Any] | None,
    labels: dict[str, Any] | None,
    started_at: datetime,
    finished_at: datetime,
    top_k: int,
    cost: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report of graded task ``entries`` (each with its ``name``), aggregated by the benchmark's rule; ``cost``, its cost block."""
    primary = str(measures[0])
    task_scores = {e["name"]: (e["measures"][primary] if e["status"] == "scored" else None) for e in entries}
    return build_report(
        benchmark={"name": benchmark.name, "version": benchmark.spec.version, "primary_measure": primary},
        subject=subject,
        tasks=entries,
        aggregate=benchmark.spec.aggregate(task_scores, tasks=list(tasks)),
        policy=policy.value,
        started_at=started_at,
        finished_at=finished_at,
        sandbox=sandbox,
        labels=labels,
        top_k=top_k,
        cost=cost,
    )


def facts_of(report: dict[str, Any]) -> dict[str, Any]:
    """What a worker states about its grade: ``report`` without a score, count or digest of any kind."""
    tasks: dict[str, Any] = {}
    for name, entry in report["tasks"].items():
        stated: dict[str, Any] = {"failure": entry.get("failure")}
        stated.update({key: entry[key] for key in TASK_FACTS if key in entry})
        tasks[name] = stated
    return {**{key: report.get(key) for key in REPORT_FACTS}, "tasks": tasks}


def _timestamp(text: Any) -> datetime:
    """A report's RFC 3339 UTC timestamp (``...Z``, as :func:`grader.reports.model.format_timestamp` writes it) read back."""
    if not isinstance(text, str) or not text.endswith("Z") or len(text) > 40:
        raise TaskFailure(FailureCode.INFRA, f"the worker's facts carry a bad timestamp {str(text)[:40]!r}")
    try:
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    except ValueError:
        raise TaskFailure(FailureCode.INFRA, f"the worker's facts carry a bad timestamp {text!r}") from None


def report_labels(facts: dict[str, Any]) -> dict[str, Any] | None:
    """The report's labels: the worker's, plus the fingerprint of its machine (``labels.fingerprint``) when it stated one.

    A fingerprint is a few short strings or lists of them; anything else is refused (``INFRA``).
    """
    labels = facts.get("labels")
    fingerprint = facts.get("fingerprint")
    if fingerprint is None:
        return labels if isinstance(labels, dict) else None

    def short(value: Any) -> bool:
        return value is None or (isinstance(value, str) and len(value) <= 200)

    fine = (
        isinstance(fingerprint, dict)
        and len(fingerprint) <= 10
        and all(
            isinstance(key, str)
            and len(key) <= 40
            and (short(value) or (isinstance(value, list) and len(value) <= 40 and all(short(v) for v in value)))
            for key, value in fingerprint.items()
        )
    )
    if not fine:
        raise TaskFailure(FailureCode.INFRA, "the worker's fingerprint is not a few short strings")
    return {**(labels if isinstance(labels, dict) else {}), "fingerprint": fingerprint}


def real_run(
    task: Task,
    data: bytes,
    judged: Sequence[str],
    *,
    depth: int,
    key: BlindingKey | None,
    overflow: dict[str, int] | None = None,
    corpus_ids: Sequence[str] | None = None,
    documents: BlindedIds | None = None,
) -> Run:
    """A worker's compact run of ``task`` (validated: :func:`grader.runs.compact.decode_run`) as a :class:`Run` under the real ids.

    Without ``key`` it indexes the canonical order of the real ids. With it, the canonical order
    of the pseudonyms (the worker's copy): it is decoded against them and renamed back
    (:func:`grader.collect.unblind.unblind_run`, which re-sorts each ranking in trec order under
    the real ids, as a direct ``grader run`` does; a run with ties carries its scores for that).
    Either way it is then cut at ``depth`` (:func:`grader.runs.ties.cut_at_depth`): a worker sends
    the boundary tie group beyond it, so the cut falls where a direct search under the real ids
    cuts. A tie group the worker had to cut is counted in ``overflow`` under the task's name. ``corpus_ids``: the
    task's corpus ids in file order, when the caller read them already (else they are read here); with ``key``,
    ``documents``: those ids blinded under it, when the caller has them (:mod:`grader.grading.blinded_documents`).
    """
    if key is None:
        corpus_ids = [document.id for document in task.iter_corpus()] if corpus_ids is None else corpus_ids
        corpus, queries = canonical_order(corpus_ids), canonical_order(list(judged))
        decoded = _decoded(data, corpus, queries, depth)
        run = decoded.to_run(corpus, queries)
    else:
        if documents is None:
            documents = blind(key, task.name, DOCUMENT, [document.id for document in task.iter_corpus()] if corpus_ids is None else corpus_ids)
        judged_ids = blind(key, task.name, QUERY, list(judged))
        decoded = _decoded(data, documents.staged, judged_ids.staged, depth)
        run = unblind_run(decoded.to_run(documents.staged, judged_ids.staged), queries=judged_ids, documents=documents)
    cut = overflowing(decoded.offsets, decoded.scores, depth)
    if cut and overflow is not None:
        overflow[task.name] = cut
    return cut_at_depth(run, depth)


def _worker_cost(
    benchmark: Benchmark, facts: dict[str, Any], *, tasks: Sequence[str], split: str, counted: Mapping[str, tuple[int, int]]
) -> dict[str, Any] | None:
    """The worker's cost block, checked against this server's own counts and the sandbox's limits; None when it stated none.

    ``counted``: the (texts, judged queries) already counted (the scored tasks': their corpus and queries were read
    for the runs); the other tasks are counted here.
    """
    stated = facts.get("cost")
    if stated is None:
        return None
    counts: dict[str, tuple[int, int]] = dict(counted)
    for name in tasks:
        if name in counts:
            continue
        task = benchmark.task(name)
        qrels = task.qrels(split)
        judged = sum(1 for query in task.iter_queries() if query.id in qrels)
        counts[name] = (sum(1 for _ in task.iter_corpus()) + judged, judged)
    fingerprint = facts.get("fingerprint")
    return checked_worker_cost(
        stated,
        tasks=tasks,
        counts=counts,
        sandbox=facts.get("sandbox"),
        fingerprint=fingerprint_digest(fingerprint) if isinstance(fingerprint, dict) else None,
    )


def _decoded(data: bytes, corpus: Sequence[str], queries: Sequence[str], depth: int) -> CompactRun:
    return decode_run(data, documents=len(corpus), queries=len(queries), depth=depth)


def report_from_runs(
    benchmark: Benchmark,
    *,
    split: str,
    tasks: Sequence[str],
    facts: dict[str, Any],
    runs: Mapping[str, bytes],
    measures: Sequence[Measure],
    policy: Policy,
    top_k: int,
    key: BlindingKey | None = None,
    kept_documents: Path | None = None,
) -> dict[str, Any]:
    """The report of a worker's grade: its ``facts`` plus each scored task's compact run scored here.

    With ``key`` (a hosted competition's blinding key), each run indexes the canonical order of the
    worker's pseudonymous copy and is mapped back to the real ids here (:func:`real_run`); each task's
    documents under the key are read from ``kept_documents`` when kept there, else blinded and kept there
    (:func:`grader.grading.blinded_documents.blinded_documents`).

    A task the facts call failed keeps its failure (the judged count is the server's); every
    other task must come with a run, which is decoded against the pinned corpus and the
    judged queries (:func:`grader.runs.compact.decode_run`, refusing as ``INFRA``) and scored.
    Raises :class:`TaskFailure` (``INFRA``) for facts that name other tasks or lack a run.
    """
    stated = facts.get("tasks")
    if not isinstance(stated, dict) or sorted(stated) != sorted(tasks):
        raise TaskFailure(FailureCode.INFRA, "the worker's facts do not name the job's tasks")
    if set(runs) - set(tasks):
        raise TaskFailure(FailureCode.INFRA, "the worker sent runs of tasks the job does not grade")
    entries: list[dict[str, Any]] = []
    overflow: dict[str, int] = {}
    counted: dict[str, tuple[int, int]] = {}  # each scored task's texts and judged queries: its corpus is read once
    for name in tasks:
        task = benchmark.task(name)
        qrels = task.qrels(split)
        digest = task.split_digest(split)
        fact = stated[name] if isinstance(stated[name], dict) else {}
        failure = fact.get("failure")
        if failure is not None:
            if name in runs:
                raise TaskFailure(FailureCode.INFRA, f"task {name}: a run was sent for a task stated as failed")
            entry = failed_task(
                name,
                split=split,
                data_digest=digest,
                code=failure["code"],
                message=str(failure["message"]),
                stderr=failure.get("stderr"),
                judged=len(qrels),
            )
        elif name not in runs:
            raise TaskFailure(FailureCode.INFRA, f"task {name}: no run was sent")
        else:
            extra = {field: fact[field] for field in TASK_FACTS if field in fact}
            judged = [query.id for query in task.iter_queries() if query.id in qrels]
            # The corpus's ids: under the key, blinded as kept; without one, read from the corpus in file order.
            documents = None if key is None else blinded_documents(task, key, kept_documents)
            corpus_ids = None if documents is not None else [document.id for document in task.iter_corpus()]
            size = len(documents.real) if documents is not None else len(corpus_ids or ())
            counted[name] = (size + len(judged), len(judged))
            run = real_run(task, runs[name], judged, depth=top_k, key=key, overflow=overflow, corpus_ids=corpus_ids, documents=documents)
            del corpus_ids, documents  # one task's ids at a time
            entry = score_task(name, split=split, data_digest=digest, qrels=qrels, run=run, measures=measures, policy=policy, extra=extra)
        entries.append({"name": name, **entry})
    labels = report_labels(facts)  # checks the stated fingerprint, which the cost block names by its digest
    report = assemble_report(
        benchmark,
        entries,
        tasks=tasks,
        measures=measures,
        policy=policy,
        subject=facts["subject"],
        sandbox=facts.get("sandbox"),
        labels=labels,
        started_at=_timestamp(facts.get("started_at")),
        finished_at=_timestamp(facts.get("finished_at")),
        top_k=top_k,
        cost=_worker_cost(benchmark, facts, tasks=tasks, split=split, counted=counted),
    )
    if overflow:  # a tie group wider than the slack: which tied documents made the depth followed the pseudonyms
        report["ranking"]["cut_by_pseudonym"] = overflow
    return report
