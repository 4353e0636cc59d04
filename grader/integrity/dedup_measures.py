"""Dedup-aware measures: a retrieved duplicate of a relevant document counts as that document.

Definition (docs/lint.md, "Dedup-aware measures"). Duplicate clusters come from a lint report. For each
evaluated query, take its ranking in the order the official evaluation scores it (trec_eval's order under
the policy: the same queries, ties, float32 rounding and dropped ids), and walk it from the top, keeping the
set of relevant documents (judgement >= 1) already *credited*:

1. a relevant document not yet credited stays itself, and is credited;
2. otherwise, when the document's cluster holds relevant documents not yet credited, it is replaced by the
   one with the highest judgement (ties: the least id, byte order), which is credited;
3. otherwise it stays itself, unless its id already stands earlier in the rewritten ranking (it was
   credited as a replacement), in which case it becomes a fresh unjudged id.

The dedup-aware value of a measure is the official measure of the rewritten rankings (scores: positions, so
the order is kept) against the unchanged judgements. Each relevant document is credited at most once and the
ideal ranking is unchanged, so NDCG stays within [0, 1]; with no clusters the values are the official ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.data.task import Task
from grader.errors import InputError, UsageError
from grader.integrity.report import lint_data_digest
from grader.metrics.measures import Measure
from grader.metrics.per_query import select_rankings
from grader.metrics.policy import Evaluation, evaluate
from grader.metrics.policy_name import Policy
from grader.runs.run import Run
from grader.schemas import first_error, json_pointer

#: Prefix of the fresh ids standing for a relevant document met again after it was credited.
FRESH_PREFIX = "dedup-aware:credited-already:"


def rewrite_rankings(qrels: Mapping[str, Mapping[str, int]], run: Run, clusters: Sequence[Sequence[str]], policy: Policy) -> dict[str, list[str]]:
    """The rewritten ranking of each query the policy evaluates and the run ranks (rules 1-3 above)."""
    cluster_of: dict[str, int] = {}
    for number, members in enumerate(clusters):
        for member in members:
            cluster_of[member] = number
    judged = [query for query, docs in qrels.items() if docs]
    present = run.query_index
    query_ids = judged if policy is Policy.STRICT else [query for query in judged if query in present]
    rankings = select_rankings(run, query_ids, float32_scores=policy is Policy.COIR, drop_identical_ids=policy is Policy.COIR)
    rewritten: dict[str, list[str]] = {}
    for index, query in enumerate(query_ids):
        if query not in present:
            continue
        relevant = {doc: grade for doc, grade in qrels[query].items() if grade >= 1}
        by_cluster: dict[int, list[str]] = {}
        for doc in relevant:
            if doc in cluster_of:
                by_cluster.setdefault(cluster_of[doc], []).append(doc)
        credited: set[str] = set()
        out: list[str] = []
        used: set[str] = set()
        fresh = 0
        for code in rankings.doc_codes[rankings.offsets[index] : rankings.offsets[index + 1]].tolist():
            doc = run.doc_vocab[code]
            if doc in relevant and doc not in credited:
                chosen = doc
            else:
                waiting = [r for r in by_cluster.get(cluster_of.get(doc, -1), ()) if r not in credited]
                if waiting:
                    chosen = min(waiting, key=lambda r: (-relevant[r], r.encode("utf-8", "surrogatepass")))
                elif doc in used:
                    fresh += 1
                    chosen = f"{FRESH_PREFIX}{fresh}"
                else:
                    chosen = doc
            if chosen in relevant:
                credited.add(chosen)
            used.add(chosen)
            out.append(chosen)
        rewritten[query] = out
    return rewritten


def evaluate_dedup_aware(
    qrels: Mapping[str, Mapping[str, int]], run: Run, measures: Sequence[Measure], policy: Policy, clusters: Sequence[Sequence[str]]
) -> Evaluation:
    """The dedup-aware values of ``measures``: the official evaluation of the rewritten rankings."""
    rewritten = rewrite_rankings(qrels, run, clusters, policy)
    mapping = {query: {doc: float(len(docs) - position) for position, doc in enumerate(docs)} for query, docs in rewritten.items()}
    for query in run.query_ids:  # queries the policy does not evaluate keep their place (the query accounting stays the same)
        if query not in mapping:
            mapping[query] = {doc: score for doc, score in run.ranking(query)}
    return evaluate(qrels, Run.from_mapping(mapping), measures, policy)


def clusters_of_task(report: Mapping[str, object], task: str | None) -> tuple[str, list[list[str]]]:
    """``(task name, clusters)`` of ``task`` in a lint report (its only task when ``task`` is None)."""
    tasks = report.get("tasks")
    if not isinstance(tasks, list):
        raise UsageError("not a lint report: no task list")
    names = [entry["task"] for entry in tasks]
    if task is None:
        if len(names) != 1:
            raise UsageError(f"the lint report has {len(names)} tasks ({', '.join(names)}): name one with --dedup-task")
        task = names[0]
    for entry in tasks:
        if entry["task"] == task:
            return task, [list(members) for members in entry["clusters"]]
    raise UsageError(f"the lint report has no task {task!r} (tasks: {', '.join(names)})")


#: Largest lint report read: its clusters list every duplicated document (a few tens of bytes each), so millions fit.
MAX_LINT_REPORT_BYTES = 256 << 20


def load_lint_report(path: Path) -> dict[str, Any]:
    """A lint report file (plain JSON, as ``grader lint --out`` writes it), bounded in size and checked against its schema."""
    report: dict[str, Any] = jsonio.load_file_as(path, InputError, max_bytes=MAX_LINT_REPORT_BYTES)
    error = first_error("lint", report)
    if error is not None:
        raise InputError(f"not a lint report: {error.message} at {json_pointer(error)}", path=path)
    return report


def load_clusters(path: Path, task: str | None) -> tuple[str, list[list[str]]]:
    """``(task name, clusters)`` from a lint report file (plain JSON, as ``grader lint --out`` writes it)."""
    return clusters_of_task(load_lint_report(path), task)


class DedupAwareRuns:
    """``grader run --dedup-aware``: the dedup-aware evaluation of each task's run as it is scored, kept beside the report.

    Built from a lint report whose data digest of every graded task must be the data's own (clusters of
    other data would name other documents). Called with each task's run under the real ids as
    :attr:`grader.grading.interfaces.RunOptions.run_observer`; the report itself never holds these values.
    """

    def __init__(self, path: Path, tasks: Mapping[str, Task], measures: Sequence[Measure], policy: Policy) -> None:
        report = load_lint_report(path)
        linted = {entry["task"]: entry for entry in report["tasks"]}
        self.clusters: dict[str, list[list[str]]] = {}
        for name, task in tasks.items():
            entry = linted.get(name)
            if entry is None:
                raise InputError(f"the lint report has no task {name!r} (tasks: {', '.join(linted)})", path=path, field="tasks")
            if entry["data_digest"] != lint_data_digest(task):
                raise InputError(f"task {name!r}: the lint report is of other data (data_digest {entry['data_digest']})", path=path, field="tasks")
            self.clusters[name] = [list(members) for members in entry["clusters"]]
        self.measures = tuple(measures)
        self.policy = policy
        self.evaluations: dict[str, Evaluation] = {}

    def __call__(self, task: str, qrels: Mapping[str, Mapping[str, int]], run: Run) -> None:
        """Evaluate ``task``'s run (the one the official measures score) the dedup-aware way."""
        self.evaluations[task] = evaluate_dedup_aware(qrels, run, self.measures, self.policy, self.clusters[task])
