"""The dissenter's re-run: is a replica outvoted by the others a liar, or is the model not deterministic?

When k replicas agree and another differs, the worker charged with the difference (its blamed worker:
:func:`grader.hosting.services.replication.blamed_worker`) grades the job once more, alone, before anything
is accepted; the majority's result waits, parked (:func:`park`). The re-run decides (:func:`settle`):

* the same output as its first (the same input gave the same output twice): the worker is consistent, so
  the difference is the worker's; the dissent stands, the worker is flagged, and the parked result is scored;
* the majority's output, or a third one: one worker gave two outputs for one input, so the difference is
  not proof against the worker; no one is flagged and the grade ends ``error`` with code ``NONDETERMINISTIC``,
  charged to no one (a participant's model that draws randomness and a worker that lied once look alike).

For a sharded grade the output compared is that of the first job whose output differed while its inputs
agreed (:func:`first_difference`); the re-run is an attempt the dissenter computes alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from grader.errors import InternalError
from grader.files import atomic_write_bytes
from grader.hosting.db.models import Replica
from grader.hosting.protocol.messages import WorkerResult
from grader.hosting.queue.replica_rows import RECHECK_VERDICT
from grader.hosting.storage import StateDir

#: A dissent whose worker is to re-run the job (pending); the re-run's own row (history, never a vote); a dissent the
#: re-run did not confirm (two outputs for one input: no one is flagged).
RECHECK, RERUN, NONDETERMINISTIC = RECHECK_VERDICT, "rerun", "nondeterministic"
#: The largest parked result read back (a worker's result body is capped far below: grader.hosting.api.body_caps).
PARKED_MAX_BYTES = 64 << 20


def first_difference(dissent: Mapping[str, Any], agreed: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first job (tasks in order; in a task the query job, then the shards by number) whose output differs between
    two replicas' details, as (task, number); None when every job both have agrees (or neither is sharded).

    A shard's inputs are its task's query vectors: once they differ, that query job is the first difference, and the
    shards that searched with them come after it. So the first difference is a job whose inputs agreed.
    """
    mine, theirs = dissent.get("jobs") or {}, agreed.get("jobs") or {}
    for task in sorted(set(mine) & set(theirs)):
        for number in sorted(set(mine[task]) & set(theirs[task]), key=int):
            if mine[task][number]["output"] != theirs[task][number]["output"]:
                return task, number
    return None


def park(state: StateDir, posted: WorkerResult, submission_id: str, attempt: int) -> str:
    """Keep the majority's result while the dissenter re-runs; its sha256 (stored with its replica: what proves it ours)."""
    data = posted.model_dump_json().encode("utf-8")
    target = state.parked_result(submission_id, attempt)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data)
    return hashlib.sha256(data).hexdigest()


def unpark(state: StateDir, submission_id: str, attempt: int, sha256: str) -> WorkerResult:
    """The parked result of ``attempt``, read back only if its sha256 is the one stored when it was parked."""
    path = state.parked_result(submission_id, attempt)
    try:
        with open(path, "rb") as handle:
            data = handle.read(PARKED_MAX_BYTES + 1)
    except OSError as error:
        raise InternalError(f"{submission_id}: the parked result of attempt {attempt} is unreadable: {error.strerror}") from None
    if len(data) > PARKED_MAX_BYTES or hashlib.sha256(data).hexdigest() != sha256:
        raise InternalError(f"{submission_id}: the parked result of attempt {attempt} is not the one parked")
    return WorkerResult.model_validate_json(data)


def settle(pending: Replica, agreed: Replica, rerun_outcome: str, rerun_jobs: Mapping[str, Any]) -> tuple[str, str]:
    """The verdict of a pending dissent after its worker's re-run (``dissent`` or ``nondeterministic``), and why, in words."""
    where = first_difference(pending.detail, agreed.detail)
    if where is not None:
        task, number = where
        job = "query job" if int(number) < 0 else f"shard {number}"
        first = pending.detail["jobs"][task][number]["output"]
        majority = agreed.detail["jobs"][task][number]["output"]
        again = ((rerun_jobs.get(task) or {}).get(number) or {}).get("output")
        what = f"task {task} {job}"
    else:
        first, majority, again, what = pending.outcome, agreed.outcome, rerun_outcome, "the outcome"
    if again == first:
        return "dissent", f"the re-run gave {what} as the first run did: the dissent stands"
    said = "the majority's" if again == majority else "a third"
    return NONDETERMINISTIC, f"the re-run gave {said} {what} where the first run did not: two outputs for one input"
