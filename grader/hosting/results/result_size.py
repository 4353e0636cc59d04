"""The largest body a worker's result can honestly be, computed from what its job grades.

A result (:class:`grader.hosting.protocol.messages.WorkerResult`) holds a report, a message
and the tails of the container logs. Of these only the report grows with the data:
each task's ``per_query`` values, one entry per judged query of the split. So the cap
of a job is a sum of bounds, each taken at its worst JSON encoding:

* per judged query, its id as JSON plus :data:`PER_QUERY_BYTES` (a float in [0, 1]
  as ``repr`` writes it, at most 24 characters, and the separators);
* per task, :data:`PER_TASK_BYTES` for its measures, counts, digest and failure;
* :data:`REPORT_BYTES` for the report's fixed fields (subject, sandbox, labels, aggregate);
* the message (``max_length`` characters) and one log tail per task plus the build
  log, each at 6 bytes a character: a container may print control characters or
  invalid UTF-8, which JSON writes as ``\\u0000`` (a replacement character is at most
  6 bytes too).

At CoIR scale (about 160,000 judged queries over 10 tasks) this is about 13 MB, where
the flat cap was 256 MiB; on mini 3.1 MB. (Since workers return rankings, a result
carries no per-query values: this bound is generous.)

The rankings themselves are put apart, one compact run per task
(:mod:`grader.runs.compact`), each held to :func:`run_caps`: its judged queries at the
hosted depth, 4 bytes a hit, 8 a query, plus the header (no scores: the ``strict`` policy
reads only the order). At depth 1000 that is about 4 KB a query: 125 MB for the
largest CoIR task (CodeFeedback-ST, 31,306 queries).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grader import jsonio
from grader.hosting.config import DEPTH
from grader.hosting.protocol.messages import WorkerResult
from grader.hosting.results.grading_adapter import LOG_TAIL_BYTES
from grader.runs.compact import compact_size
from grader.runs.ties import tie_slack

PER_QUERY_BYTES = 32
PER_TASK_BYTES = 16 << 10
REPORT_BYTES = 64 << 10
#: The worst JSON encoding of one character of a message or log (``\\u001b``).
ESCAPED = 6
#: Logs beside the tasks' own (the image build, the worker's): a few.
EXTRA_LOGS = 4


def _message_chars() -> int:
    for item in WorkerResult.model_fields["message"].metadata:
        if hasattr(item, "max_length"):
            return int(item.max_length)
    raise AssertionError("WorkerResult.message has no max_length")  # pragma: no cover


def result_cap(judged_ids: Iterable[Iterable[str]]) -> int:
    """The largest result body of a job whose tasks judge the queries ``judged_ids`` (one iterable of ids per task)."""
    tasks = 0
    size = REPORT_BYTES + ESCAPED * _message_chars()
    for ids in judged_ids:
        tasks += 1
        size += PER_TASK_BYTES + sum(len(jsonio.dumps(query_id, ensure_ascii=True)) + PER_QUERY_BYTES for query_id in ids)
    return size + ESCAPED * LOG_TAIL_BYTES * (tasks + EXTRA_LOGS)


def job_result_cap(benchmark: Any, tasks: list[str], splits: Iterable[str]) -> int:
    """The largest :func:`result_cap` over the jobs of a competition: its tasks graded on each of ``splits``."""
    return max(result_cap(benchmark.task(name).qrels(split).keys() for name in tasks) for split in splits)


def run_caps(benchmark: Any, tasks: list[str], splits: Iterable[str]) -> dict[tuple[str, str], int]:
    """The largest compact run of each task on each of ``splits``: its judged queries at the hosted depth, with scores.

    A run carries its scores when a ranking has ties (the server re-sorts it under the real ids:
    :func:`grader.runs.compact.has_ties`), so the bound allows them, and each query's boundary
    tie group beyond the depth (:func:`grader.runs.ties.tie_slack`).
    """
    depth = DEPTH + tie_slack(DEPTH)
    return {(name, split): compact_size(len(benchmark.task(name).qrels(split)), depth, scores=True) for name in tasks for split in set(splits)}
