"""What a worker and the server exchange about shard jobs, as Pydantic models apart from the whole-job ones.

Kept beside :mod:`grader.hosting.protocol.messages` (which they extend) so that the shard routes
(:mod:`grader.hosting.api.routes.shards`) and the worker's shard loop
(:mod:`grader.hosting.worker.shard_loop`) read one definition.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from grader.failures import FailureCode
from grader.hosting.config import DEFAULT_UNPACKED_BYTES
from grader.hosting.protocol.messages import FingerprintDigest, TaskProgress, TryNumber, _Request
from grader.hosting.protocol.version import WORKER_PROTOCOL

#: The header of the query vectors' answer naming their sha256 (the digest their query job returned; the worker checks it).
QUERIES_SHA256 = "Grader-Queries-Sha256"


class ShardClaimRequest(_Request):
    """A worker asks for a shard job, naming the digest of the fingerprint bound to it (a task's jobs run on one fingerprint).

    The server leases under the digest it holds bound, never under this one: a claim naming another is refused (409).
    """

    fingerprint: FingerprintDigest
    wait_s: float = Field(default=0.0, ge=0, le=30)


class ShardJobMessage(BaseModel):
    """A claimed shard job: a task's query job (``number`` -1) or one shard, under a lease of its own."""

    #: the worker protocol the server handed it out under (grader.hosting.protocol.version): a worker reads it first
    protocol: int = WORKER_PROTOCOL
    job_id: int
    tries: int = Field(ge=1)
    submission_id: str
    attempt: int
    task: str
    number: int
    lease_s: float
    heartbeat_s: float
    upload_sha256: str
    benchmark: str
    split: str
    #: the judged query ids of the task (the judgements stay on the server)
    judged: list[str]
    ranking_digest: str
    shard_documents: int | None
    search_memory: int
    depth: int
    #: the sha256 of the task's query vectors when they were in at the claim; None for the query job, and for a shard
    #: claimed while its query job ran (protocol 5: it fetches them later, their sha256 in the answer's QUERIES_SHA256 header)
    queries_sha256: str | None
    max_query_bytes: int
    #: the competition's sandbox limits (grader.sandbox.limits.SandboxLimits.as_report): time and memory apply per shard job
    limits: dict[str, Any]
    max_unpack_ratio: float = 20.0
    max_unpacked_bytes: int = DEFAULT_UNPACKED_BYTES


#: The header of a shard job's output put that states what the job cost (a :class:`ShardJobCost`'s JSON; optional).
SHARD_COST = "Grader-Shard-Cost"
#: The most bytes of that header read.
SHARD_COST_BYTES = 1024
#: Seconds and CPU seconds above this are no job's (a week): refused.
_MAX_SECONDS = 7 * 24 * 3600.0


class ShardJobCost(_Request):
    """What one shard job's container used, as its worker states it with the output (worker protocol 5): its word,
    bounded here and held to the job's sandbox limits by the server (:func:`grader.grading.worker_cost.check_figures`)."""

    #: wall seconds of the job's container (model load included); the wait for query vectors is not in it
    encode_s: float | None = Field(ge=0, le=_MAX_SECONDS, allow_inf_nan=False)
    #: wall seconds of a shard's search (None for the query job)
    search_s: float | None = Field(default=None, ge=0, le=_MAX_SECONDS, allow_inf_nan=False)
    cpu_s: float | None = Field(default=None, ge=0, le=_MAX_SECONDS, allow_inf_nan=False)
    peak_memory_bytes: int | None = Field(default=None, ge=0, le=1 << 50)
    measured_by: str = Field(default="", max_length=300)


class ShardTry(_Request):
    """The try of a shard job a heartbeat is about."""

    tries: TryNumber


class ShardFailure(_Request):
    """A shard job that failed: INFRA re-queues it alone; a participant's code fails its task."""

    tries: TryNumber
    #: One of the codes: any other is refused (422) before anything is stored.
    failure_code: FailureCode
    message: str = Field(default="", max_length=20_000)
    #: The sha256 of the query vectors a shard job found suspect (they do not fit its documents, its worker's own do):
    #: INFRA only; the server re-runs the task's query job (grader.hosting.queue.shard_jobs.requeue_suspect). Optional:
    #: a worker that does not send it is read as before.
    suspect_queries: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _suspect_is_infra(self) -> ShardFailure:
        """Suspect query vectors are the platform's fault: a participant's code with them is refused (422)."""
        if self.suspect_queries is not None and self.failure_code is not FailureCode.INFRA:
            raise ValueError("suspect_queries comes with failure_code INFRA only")
        return self


class ShardGradeStatus(BaseModel):
    """Where a sharded attempt stands: ``running``, ``done`` (``runs``: each merged run's sha256) or ``stale``; per task a failure."""

    state: str
    runs: dict[str, str] = Field(default_factory=dict)
    failures: dict[str, list[str]] = Field(default_factory=dict)
    #: while it runs and once done, per task: shards ranked of shards planned (worker protocol 4; the coordinator logs them)
    progress: list[TaskProgress] = Field(default_factory=list)
    #: once done: the ``grader-cost/v1`` block of its jobs' figures merged per task (worker protocol 5: the coordinator
    #: states it as its facts' ``cost``; the server checks it as any worker's)
    cost: dict[str, Any] | None = None
