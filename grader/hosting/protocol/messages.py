"""What the server and its workers and participants exchange, as Pydantic models: one definition for both sides.

The server builds these and FastAPI publishes their schemas (``/openapi.json``);
the worker reads a claimed job and writes its result through the same classes, so
neither side reads string keys. Field caps are those of the API today.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer, model_validator

from grader.failures import FailureCode
from grader.hosting.config import DEFAULT_UNPACKED_BYTES
from grader.hosting.protocol.version import WORKER_PROTOCOL
from grader.hosting.states import State, Track
from grader.hosting.visibility import Part

TaskName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
RunDigest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
#: The largest row id, attempt or try a worker may name: the databases' INTEGER columns hold no more (PostgreSQL's are
#: 32-bit; SQLite overflows past 64 bits), so a larger number is refused as input (422), never met by the database (500).
ROW_NUMBER_MAX = 2**31 - 1
#: An attempt's or a shard job's try number, as a worker names it.
TryNumber = Annotated[int, Field(ge=1, le=ROW_NUMBER_MAX)]


class RunStored(BaseModel):
    """A compact run the server stored for an attempt: its sha256, as the server computed it."""

    sha256: str
    bytes: int


class _Request(BaseModel):
    """What the server reads: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


#: A worker's machine as it states it (grader.hosting.worker.fingerprint): replicas are paired only between equal ones.
Fingerprint = dict[Annotated[str, StringConstraints(max_length=40)], str | list[Annotated[str, StringConstraints(max_length=200)]] | None]
#: The sha256 of a fingerprint's canonical JSON, as a claim names it.
FingerprintDigest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
#: Where a worker states its fingerprint (once; signed by a remote worker's key), and reads what it must sign.
FINGERPRINT_PATH = "/api/v1/worker/fingerprint"
#: The 409 of a claim by a worker with no fingerprint bound (never stated, or reset by the host): the worker states it, then claims.
UNBOUND = f"no fingerprint is bound to this worker: state your fingerprint first (POST {FINGERPRINT_PATH})"


class ClaimRequest(_Request):
    """A worker asks for a job, naming the digest of the fingerprint bound to it (a claim naming another is refused, 409)."""

    wait_s: float = Field(default=10.0, ge=0, le=30, description="long-poll: wait up to this long for a job")
    fingerprint: FingerprintDigest = Field(description="the digest of the fingerprint bound to this worker (POST /api/v1/worker/fingerprint)")


#: A competition's name as a worker names it (the pattern of grader.hosting.directory.layout.NAME).
CompetitionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
#: The most competitions one claim may name: a server's directory, not a list without end.
MAX_CLAIM_COMPETITIONS = 64
#: Where a worker of many competitions claims, on the server (not under a competition's /c/<name>/).
SERVER_CLAIM_PATH = "/api/v1/worker/claim"


class ServerClaimRequest(_Request):
    """A worker of a server of many competitions asks for a job of any of ``competitions`` (those it holds a copy of)."""

    wait_s: float = Field(default=10.0, ge=0, le=30, description="long-poll: wait up to this long for a job")
    fingerprint: FingerprintDigest = Field(description="the digest of the fingerprint bound to this worker in each competition named")
    competitions: list[CompetitionName] = Field(
        min_length=1, max_length=MAX_CLAIM_COMPETITIONS, description="the competitions this worker serves: it holds each one's data copy"
    )


class FingerprintStatement(_Request):
    """A worker states its fingerprint: bound on the first statement, refused (409) when it is not the one bound."""

    fingerprint: Fingerprint = Field(max_length=10, description="the worker's machine: replicas of a job go only to workers of equal fingerprint")
    #: base64 Ed25519 signature by a remote worker's registered key over its name, the competition and the fingerprint
    #: (grader.hosting.keyring.worker_signing.fingerprint_message); None for a local worker (the server's own)
    signature: str | None = Field(default=None, max_length=200)


class FingerprintBinding(BaseModel):
    """What a worker signs its statement over (its name, the competition), and the digest bound to it (None: none)."""

    worker: str
    competition: str
    fingerprint: str | None


class Job(BaseModel):
    """A claimed job: what to grade, on which data, under which lease."""

    #: the worker protocol the server handed it out under (grader.hosting.protocol.version): a worker reads it first
    protocol: int = WORKER_PROTOCOL
    #: the competition the job is of: every later call about it goes to that competition's routes (/c/<name>/api/v1/worker/...)
    competition: CompetitionName
    submission_id: str
    attempt: int = Field(ge=1)
    lease_expires_at: str | None
    lease_s: float
    heartbeat_s: float
    upload_sha256: str
    benchmark: str
    tasks: list[str]
    split: str
    track: Track
    limits: dict[str, Any]
    #: per task, the pinned digest of the split's whole data, judgements included: a worker refuses a job that asks it
    #: to hold them (a server from before workers ranked without them); this server sends none
    data_digests: dict[str, str | None] = Field(default_factory=dict)
    #: per task, the pseudonyms of the split's judged queries (staging needs them; the judgements stay on the server)
    judged: dict[str, list[str]] = Field(default_factory=dict)
    #: per task, the digest of the worker's pseudonymous data copy it ranks on: corpus, queries, judged ids
    #: (grader.data.task.Task.ranking_digest of the folder `grader admin export-worker-data` writes). No blinding key:
    #: the server alone keeps it, and maps the runs back to the real ids (docs/protocol.md).
    ranking_digests: dict[str, str] = Field(default_factory=dict)
    #: the competition's bounds on what the upload unpacks to (the worker unpacks it again); defaults: a server before them
    max_unpack_ratio: float = 20.0
    max_unpacked_bytes: int = DEFAULT_UNPACKED_BYTES
    #: a sharded ONNX grade: the claimer coordinates, shard jobs rank (grader.hosting.worker.shard_loop)
    sharded: bool = False


class AttemptRef(_Request):
    """Names the attempt a worker's request is about (a heartbeat, a shard status poll); the attempts row is ``db.models.Attempt``."""

    attempt: TryNumber


#: How many tasks a heartbeat's progress may name: a competition's tasks, never a list without end.
MAX_PROGRESS_TASKS = 200


class Phase(enum.StrEnum):
    """Where one task of a grade is (docs/hosting.md, "Following a submission")."""

    #: not started yet (a task after the one being ranked)
    WAITING = "waiting"
    #: the submission's model encodes the task's documents and queries (its container runs)
    ENCODING = "encoding"
    #: the worker searches the vectors for each query's ranking
    SEARCHING = "searching"
    #: ranked: its run is made (the server scores it once every task is ranked)
    RANKED = "ranked"
    #: ranking it failed (the report says why)
    FAILED = "failed"
    #: the server scores the posted runs (set by the server, never by a worker)
    SCORING = "scoring"


class TaskProgress(_Request):
    """One task's progress as a worker reports it: only counts ``grader check`` shows already (documents of the split)."""

    task: TaskName
    phase: Phase
    #: the task's documents (public: ``grader check`` prints them) and how many are encoded so far (None: not known)
    documents: int | None = Field(default=None, ge=0, le=ROW_NUMBER_MAX)
    encoded: int | None = Field(default=None, ge=0, le=ROW_NUMBER_MAX)
    #: of a sharded grade: shards of the task ranked so far, and how many there are
    shards_done: int | None = Field(default=None, ge=0, le=10_000)
    shards: int | None = Field(default=None, ge=1, le=10_000)

    @model_validator(mode="after")
    def _counts_agree(self) -> TaskProgress:
        """A count past its total is refused (422 naming it), never shown."""
        if self.encoded is not None and (self.documents is None or self.encoded > self.documents):
            raise ValueError("encoded must come with documents and be at most documents")
        if self.shards_done is not None and (self.shards is None or self.shards_done > self.shards):
            raise ValueError("shards_done must come with shards and be at most shards")
        return self


class HeartbeatRequest(_Request):
    """A heartbeat: the attempt whose lease to renew and, since worker protocol 4, where each task of the grade is."""

    attempt: TryNumber
    progress: list[TaskProgress] = Field(default_factory=list, max_length=MAX_PROGRESS_TASKS)


class Lease(BaseModel):
    """A renewed lease."""

    lease_expires_at: str | None


class WorkerKey(_Request):
    """A remote worker's public key, recorded on first use."""

    public_key: str = Field(max_length=1000, description="the worker's Ed25519 public key (PEM)")


class KeyStatus(BaseModel):
    """``same``, ``recorded`` or ``local`` (a different key is refused with 409)."""

    status: str


class WorkerResult(_Request):
    """The outcome of one attempt, posted by the worker that holds its lease."""

    attempt: TryNumber
    #: What the worker states that is not a score (grader.grading.scoring.facts_of); there is no report field:
    #: the server scores the runs itself, so a worker cannot post a score.
    facts: dict[str, Any] | None = None
    #: Per ranked task, the sha256 of the compact run it put at ``jobs/{id}/runs/{task}`` (docs/protocol.md).
    runs: dict[TaskName, RunDigest] = Field(default_factory=dict, max_length=1000)
    #: One of the codes (any other is refused, 422); as a StrEnum it signs the same bytes as its spelling.
    failure_code: FailureCode | None = None
    message: str = Field(default="", max_length=20_000)
    logs: dict[str, str] = Field(default_factory=dict)
    signature: str | None = Field(
        default=None,
        max_length=200,
        description="a remote worker's Ed25519 signature (base64) of the result (facts, run digests, code, message), bound to the upload's sha256 and the attempt",
    )


class VerdictStatus(enum.StrEnum):
    """What the server did with a posted result; the route answers the last two with 409 and 403, the others in a :class:`Verdict`."""

    ACCEPTED = "accepted"
    #: a platform failure: the job went back to the queue (or to ``replicating``)
    REQUEUED = "requeued"
    #: a platform failure at the attempt limit, or replicas without a majority: the job ended ``error``
    ERROR = "error"
    #: recorded as a replica: another worker of the fingerprint grades the job (docs/hosting.md "Replicas")
    REPLICATED = "replicated"
    #: the attempt no longer holds the lease (expired and handed on, cancelled, or already accepted): discarded
    STALE = "stale"
    #: a remote worker's result not signed by its registered key over this upload and attempt
    REFUSED = "refused"


class Verdict(BaseModel):
    """What the server did with a posted result (:class:`VerdictStatus`), with the submission's new state when it moved."""

    status: VerdictStatus
    state: str | None = None


class SubmissionView(BaseModel):
    """What a participant sees of their own submission (fields not applicable to it are left out)."""

    id: str
    name: str
    kind: str
    track: Track
    split: str
    state: State
    failure_code: FailureCode | None
    uploaded_at: str | None
    updated_at: str | None
    sha256: str
    report_available: bool
    #: the public part's score of a hidden grade until the end (rounded); a sample run's whole score
    score: float | None = None
    part: str | None = None
    private_score: float | None = None
    full_score: float | None = None
    last_log_line: str | None = None
    #: In the upload's answer: the receipt entry, its entry key, index, leaf hash and tlog-proof (docs/transparency.md).
    receipt: dict[str, Any] | None = None
    #: While it waits or runs: its place in the queue, the estimate, why it waits, each task's progress (one submission's view only).
    queue: QueueView | None = None


class QueueView(BaseModel):
    """Where a waiting or running submission is (docs/hosting.md, "Following a submission"); None fields are not known."""

    #: 1 for the next submission a free worker takes; None while it runs
    position: int | None = None
    #: submissions of this competition before it in the queue, and those running now
    ahead: int = 0
    running: int = 0
    #: workers of this competition heard from lately, and those of them free now
    workers: int = 0
    free_workers: int = 0
    #: the median grade of this competition's recent grades of its track, in seconds, and how many grades it is of
    typical_s: float | None = None
    typical_of: int = 0
    #: when its grading started (running) or is estimated to start, and to end; None: no estimate (no worker, no grade yet)
    starts_at: str | None = None
    ends_at: str | None = None
    #: why it waits, when it waits for something a free worker does not fix (one line), else None
    waiting: str | None = None
    #: per task, where the running grade is (worker protocol 4), with the moment of the last report
    progress: list[TaskProgress] = Field(default_factory=list)
    progress_at: str | None = None


class QuotaView(BaseModel):
    """A participant's quota on one track: what they used, the limits, and when the next submission is possible."""

    track: Track
    used_24h: int
    per_day: int
    used_total: int | None
    total: int | None
    in_flight: int
    concurrent: int
    next_possible_at: str | None
    #: bytes of the participant's stored uploads (both tracks) and of those still arriving, and the competition's bound on them
    stored_bytes: int
    stored_limit: int | None
    #: refused uploads and platform failures in the last hour (both tracks), their bounds, and when the count next drops
    refused_last_hour: int
    errors_last_hour: int
    refusals_per_hour: int | None
    infra_per_hour: int | None
    refusals_drop_at: str | None
    #: CPU seconds the participant's grades of the last 24 h cost (both tracks: the workers' word), the CPU-minute quota
    #: (None: none), and when enough drops out of the window (None: not at the quota)
    cpu_s_24h: float = 0.0
    cpu_minutes_per_day: float | None = None
    cpu_next_at: str | None = None


class Quota(BaseModel):
    """A participant's quota on each track."""

    hidden: QuotaView
    sample: QuotaView


class Finals(_Request):
    """A participant's choice of final submissions (replaces earlier choices)."""

    submissions: list[str] = Field(max_length=50)


class FinalsView(BaseModel):
    """A participant's final submissions, whether they chose them, and how many they may choose."""

    finals: list[str]
    chosen: bool
    limit: int


class Comparison(BaseModel):
    """An entry against the one ranked above it (rounded)."""

    submission: str
    difference: float | None
    effect_size: float | None
    t_p_holm: float | None
    randomization_p_holm: float | None


class BoardEntry(BaseModel):
    """One row of a board as published (numbers rounded; in Ladder mode only the released score and the rank)."""

    rank: int | None
    rank_interval: list[int] | None
    group: int | None
    participant: str
    team: str | None
    baseline: bool
    submission: str
    name: str
    kind: str
    setting: str
    training_data: Any
    model: dict[str, Any]
    final: bool
    score: float | None
    ladder: bool
    interval: list[float | None]
    tasks: dict[str, float | None]
    vs_above: Comparison | None
    date: str | None
    report: str | None
    #: "report unavailable": the row's signed report cannot be read, so it shows no number (absent from every other row)
    unavailable: str | None = None
    #: the released contamination figure of the row's signed report, one line per task (absent when it carried no sketch)
    contamination: str | None = None
    #: CPU seconds per 1,000 queries from the row's signed report's cost block: the grading worker's word (absent without one)
    cpu_s_per_1000_queries: float | None = None
    #: a team's row, after the end only: the member who made its submission (the name its log entries commit, which
    #: `grader log audit --board` opens them to); absent from every other row
    made_by: str | None = None

    @model_serializer(mode="wrap")
    def _without_unavailable(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A row as published: ``unavailable``, ``contamination``, the cost and ``made_by`` only on a row they concern (every other row as before they existed)."""
        data: dict[str, Any] = handler(self)
        for optional in ("unavailable", "contamination", "cpu_s_per_1000_queries", "made_by"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data


class BoardView(BaseModel):
    """The board of one training setting, as published (the board computed: :class:`grader.hosting.leaderboard.board.Board`)."""

    setting: str
    title: str
    method: dict[str, Any]
    entries: list[BoardEntry]


class Boards(BaseModel):
    """The boards of one part (public, or private after the end)."""

    competition: str
    part: Part
    ended: bool
    host_key: str
    boards: list[BoardView]
