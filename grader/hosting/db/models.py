"""Every table of the hosting database. The schema is versioned by Alembic (grader/hosting/migrations).

A submission's state lives here and only here. It moves through
:mod:`grader.hosting.queue.lifecycle`, which writes one :class:`Transition`
row per move, in the same transaction as the move; the legal moves are the table
of :mod:`grader.hosting.states`.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from grader.hosting.states import IN_FLIGHT, State, Track


class UTCDateTime(TypeDecorator[datetime]):
    """A UTC instant: stored without zone (SQLite has none), always returned timezone-aware."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


#: States that count against a participant's quota: everything the participant caused.
#: ``failed`` only ever holds participant failures; platform failures end ``error``; host cancels ``cancelled``.
CHARGED_STATES = (State.RECEIVED.value, State.QUEUED.value, State.RUNNING.value, State.REPLICATING.value, State.SCORED.value, State.FAILED.value)
IN_FLIGHT_STATES = tuple(state.value for state in State if state in IN_FLIGHT)


def _stored_enum(kind: type[enum.StrEnum], name: str) -> Enum:
    """``kind`` stored as its values in a VARCHAR(16) with a CHECK constraint named ``ck_<name>`` (the same on SQLite and PostgreSQL)."""
    return Enum(
        kind,
        name=f"ck_{name}",
        native_enum=False,
        create_constraint=True,
        length=16,
        values_callable=lambda members: [member.value for member in members],
        validate_strings=True,
    )


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON}  # noqa: RUF012 - SQLAlchemy reads this class attribute


class Participant(Base):
    """Someone who submits; authenticated by a token of which only the SHA-256 is stored."""

    __tablename__ = "participants"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    team: Mapped[str | None] = mapped_column(String(100))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    is_baseline: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class Registration(Base):
    """A sign-up on the web (docs/hosting.md, "Sign-up"): the person's name, the rules they accepted, the host's
    decision. ``email`` is the person's own word, for the host only: no route shows it."""

    __tablename__ = "registrations"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    email: Mapped[str | None] = mapped_column(String(254))
    rules_sha256: Mapped[str] = mapped_column(String(64))
    #: pending (approval asked), approved (a participant now), refused (by the host)
    state: Mapped[str] = mapped_column(String(16), index=True)
    requested_at: Mapped[datetime]
    decided_at: Mapped[datetime | None]


class Team(Base):
    """A team of participants (docs/hosting.md, "Teams"): shares its quotas and sees its submissions. Not the ``team``
    label of :class:`Participant`, which stays a label."""

    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime]


class TeamMember(Base):
    """A participant's membership: the primary key makes it at most one team per participant (each competition has its
    own database, so: per competition)."""

    __tablename__ = "team_members"
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    joined_at: Mapped[datetime]


class TeamInvite(Base):
    """A one-time invitation code to a team: only its SHA-256 is stored; taken once (``used_at``), before ``expires_at``."""

    __tablename__ = "team_invites"
    code_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None] = mapped_column(default=None)


class WebSession(Base):
    """A signed-in web session. The cookie carries its id; only the id's SHA-256 is stored. Signing out ends it here."""

    __tablename__ = "web_sessions"
    id_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    started_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]


class Worker(Base):
    """A worker allowed to claim jobs (local ones are re-keyed at every server start)."""

    __tablename__ = "workers"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    #: Ed25519 public key (PEM) of a remote worker that signs its results; None for local workers.
    public_key: Mapped[str | None] = mapped_column(Text)
    local: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    #: sha256 of the fingerprint bound to the worker (grader.hosting.worker.fingerprint): stated once, on
    #: ``POST /api/v1/worker/fingerprint``; every claim must name it. None: none bound yet, or reset by the host.
    fingerprint: Mapped[str | None] = mapped_column(String(64), default=None)
    #: The fingerprint bound, as stated (the canonical dict the digest is of; what a remote worker's signature covers).
    fingerprint_stated: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    #: A remote worker's signature of the statement (base64 Ed25519, grader.hosting.keyring.worker_signing); None for a local worker.
    fingerprint_signature: Mapped[str | None] = mapped_column(Text, default=None)
    #: Claims and statements refused for naming another fingerprint than the bound one (or a statement not signed by the
    #: worker's key), and the digest the last one named: what ``grader admin workers`` shows the host.
    fingerprint_refusals: Mapped[int] = mapped_column(Integer, default=0)
    fingerprint_refused: Mapped[str | None] = mapped_column(String(64), default=None)


class Pin(Base):
    """The benchmark data digests and grader version a competition grades with; exactly one is active."""

    __tablename__ = "pins"
    id: Mapped[int] = mapped_column(primary_key=True)
    competition: Mapped[str] = mapped_column(String(64))
    grader_version: Mapped[str] = mapped_column(String(64))
    digests: Mapped[dict[str, Any]]
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    pinned_at: Mapped[datetime]


class Setting(Base):
    """Small host-controlled values, e.g. ``ended_at`` (set by ``grader admin end``)."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Submission(Base):
    """One upload and its job. ``attempt`` is the number of the newest claim; ``version`` guards every update."""

    __tablename__ = "submissions"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"))
    #: The team its participant was a member of at upload (None: none): the submission is the team's, and stays the team's
    #: when its maker leaves (docs/hosting.md, "Teams"); None before 0019.
    team_id: Mapped[int | None] = mapped_column(ForeignKey("teams.id"), nullable=True, default=None, index=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    #: ``hidden`` (the competition's split, counted in the quota) or ``sample`` (the public sample split, logs visible)
    track: Mapped[Track] = mapped_column(_stored_enum(Track, "submission_track"))
    split: Mapped[str] = mapped_column(String(64))
    state: Mapped[State] = mapped_column(_stored_enum(State, "submission_state"))
    failure_code: Mapped[str | None] = mapped_column(String(32))
    upload_path: Mapped[str] = mapped_column(String(500))
    upload_sha256: Mapped[str] = mapped_column(String(64))
    upload_bytes: Mapped[int] = mapped_column(Integer)
    content_digest: Mapped[str] = mapped_column(String(64))
    #: SHA-256 of the training sketch a hidden-track upload carried, kept at ``uploads/<id>.sketch`` (None: none):
    #: the scoring process audits that file only if it still has this digest (the server proves it wrote it)
    sketch_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True, default=None)
    #: When the upload completed: the deadline and the rolling quota are judged on it.
    uploaded_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    #: When a job last became claimable or was last (re-)dispatched; the reaper re-dispatches older ones.
    dispatched_at: Mapped[datetime | None]
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    #: The last attempt number allowed before the job ends ``error`` (INFRA); a rejudge raises it.
    attempt_limit: Mapped[int] = mapped_column(Integer)
    #: After an attempt's platform failure: not claimed before this (the backoff); None: at once.
    retry_at: Mapped[datetime | None] = mapped_column(default=None)
    #: When the grade's first reported platform failure was: attempts are retried for ``[queue] infra_retry_s`` from it
    #: (beyond ``attempt_limit``); cleared when the grade is queued afresh (a rejudge).
    infra_since: Mapped[datetime | None] = mapped_column(default=None)
    lease_worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id"))
    lease_expires_at: Mapped[datetime | None]
    version: Mapped[int] = mapped_column(Integer, default=0)
    pin_id: Mapped[int] = mapped_column(ForeignKey("pins.id"))
    public_score: Mapped[float | None] = mapped_column(Float)
    result_id: Mapped[int | None] = mapped_column(Integer)
    #: What the manifest declares: training setting and data, model facts (parameters, dimension, ...); None before 0002.
    labels: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: The client's idempotency key of the upload (None before 0004 and for uploads sent without one): a retried
    #: upload with the same key is answered with this submission instead of becoming a second one.
    idempotency_key: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        Index("ix_submissions_state", "state"),
        Index("ix_submissions_participant", "participant_id", "uploaded_at"),
        UniqueConstraint("participant_id", "idempotency_key", name="uq_submissions_participant_key"),
    )


class UploadReservation(Base):
    """An upload admitted but not yet complete: it holds its quota and concurrency slot until it commits,
    is refused, or expires (a server killed mid-upload releases nothing; expiry does).

    Keyed by the upload's idempotency key, so that a retried upload takes its own reservation over.
    """

    __tablename__ = "upload_reservations"
    id: Mapped[int] = mapped_column(primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"))
    idempotency_key: Mapped[str] = mapped_column(String(64))
    track: Mapped[Track] = mapped_column(_stored_enum(Track, "upload_reservation_track"))
    #: The SHA-256 the client declared of the body (``Content-Digest``); a retry must send the same body.
    body_sha256: Mapped[str] = mapped_column(String(64))
    declared_bytes: Mapped[int] = mapped_column(BigInteger)
    #: Which request holds it now (a retry takes it over): only the holder's failure releases it.
    holder: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    #: When the holder last showed progress (bytes arrived, or its check of the complete body still ran), refreshed
    #: at most once a second: a copy with recent progress is "arriving", and another copy under its key waits (409).
    arrived_at: Mapped[datetime]

    __table_args__ = (
        UniqueConstraint("participant_id", "idempotency_key", name="uq_upload_reservations_participant_key"),
        Index("ix_upload_reservations_expires_at", "expires_at"),
    )


class Transition(Base):
    """The audit trail: one row per state change, with its time, attempt and reason."""

    __tablename__ = "transitions"
    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), index=True)
    #: None on a submission's first row (it is created ``received``)
    from_state: Mapped[State | None] = mapped_column(_stored_enum(State, "transition_from_state"))
    to_state: Mapped[State] = mapped_column(_stored_enum(State, "transition_to_state"))
    attempt: Mapped[int] = mapped_column(Integer)
    actor: Mapped[str] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime]


class Attempt(Base):
    """One claim of a job by a worker: its lease, heartbeats and how it ended."""

    __tablename__ = "attempts"
    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"))
    claimed_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime]
    lease_expires_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    #: ``result``, ``lease expired``, ``cancelled``, ``infra``...
    outcome: Mapped[str | None] = mapped_column(String(32))
    #: where each task is, as the worker's last heartbeat said (``{"tasks": [TaskProgress, ...]}``), and when it was stored
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    progress_at: Mapped[datetime | None] = mapped_column(default=None)


class Result(Base):
    """An accepted grade (immutable; a rejudge adds a row). Files live in the state folder."""

    __tablename__ = "results"
    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    pin_id: Mapped[int] = mapped_column(ForeignKey("pins.id"))
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"))
    #: the grade's outcome, as a submission state
    state: Mapped[State] = mapped_column(_stored_enum(State, "result_state"))
    failure_code: Mapped[str | None] = mapped_column(String(32))
    #: The report's aggregate (what the public view may show, after rounding).
    aggregate: Mapped[dict[str, Any] | None]
    envelope_path: Mapped[str | None] = mapped_column(String(500))
    report_path: Mapped[str | None] = mapped_column(String(500))
    logs_path: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime]
    #: A remote worker's Ed25519 signature (base64) over what it posted (grader.hosting.keyring.worker_signing); None for local workers.
    worker_signature: Mapped[str | None] = mapped_column(String(200), default=None)
    #: The CPU seconds the grade cost (its signed report's ``cost.total.cpu_s``: the grading worker's word), charged to the
    #: CPU-minute quota (``quotas.cpu_minutes_per_day``); None: no figure (no cost block, or a CPU figure missing)
    cpu_s: Mapped[float | None] = mapped_column(Float, default=None)


class Replica(Base):
    """One worker's grade of a replicated job (``replicas`` > 1): what it returned, kept to be compared with the others'.

    ``outcome`` is the sha256 of the canonical outcome (run digests, failure codes: grader.hosting.services.replication);
    ``verdict`` is set when the replicas are decided: ``majority``, ``dissent`` (``blamed_worker_id`` is flagged for the host), ``outvoted``
    (it only ran out of time or memory where the majority did not: not flagged) or ``undecided`` (no majority: the job ended ``error``).
    """

    __tablename__ = "replicas"
    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    pin_id: Mapped[int] = mapped_column(ForeignKey("pins.id"))
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"), index=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    outcome: Mapped[str] = mapped_column(String(64))
    #: {"failure_code": ..., "runs": {task: sha256}, "task_failures": {task: code}}
    detail: Mapped[dict[str, Any]]
    verdict: Mapped[str | None] = mapped_column(String(16), default=None)
    #: A ``dissent``'s flagged worker: its coordinator, or the worker of the first of its shard jobs whose output differs from
    #: the majority's while its inputs agree (grader.hosting.services.replication); None for any other verdict.
    blamed_worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id"), index=True, default=None)
    created_at: Mapped[datetime]


class ResultPart(Base):
    """A scored result's primary measure on the full hidden split, its public part and its private part.

    Computed on the server from the signed report's per-query values and the
    partition secret (workers never hold it); only the host sees the private columns before the end.
    """

    __tablename__ = "result_parts"
    result_id: Mapped[int] = mapped_column(ForeignKey("results.id"), primary_key=True)
    full_score: Mapped[float] = mapped_column(Float)
    public_score: Mapped[float] = mapped_column(Float)
    private_score: Mapped[float] = mapped_column(Float)
    #: {"full"|"public"|"private": {task: score}}
    tasks: Mapped[dict[str, Any]]
    computed_at: Mapped[datetime]


class FinalChoice(Base):
    """A submission its participant marked as final (at most ``leaderboard.finals`` per participant)."""

    __tablename__ = "final_choices"
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    chosen_at: Mapped[datetime]


class LogEntry(Base):
    """One entry of the competition's transparency log (grader.hosting.transparency.log_store): append-only.

    Written in the transaction of the event it records; never updated or deleted (a removal is a
    retraction entry). ``submission_id`` and ``envelope_sha256`` are the host's private index to find an
    entry's proof; the public entry names neither.
    """

    __tablename__ = "log_entries"
    index: Mapped[int] = mapped_column("idx", BigInteger, primary_key=True, autoincrement=False)
    entry: Mapped[bytes] = mapped_column(LargeBinary)
    kind: Mapped[str] = mapped_column(String(16))
    submission_id: Mapped[str | None] = mapped_column(String(32), index=True)
    envelope_sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime]


class ShardJob(Base):
    """One job of a sharded ONNX grade: a task's query job (``number`` -1) or one of its shards.

    Planned per submission attempt; each row has its own lease and tries, so a lost shard is
    re-run alone (grader.hosting.queue.shard_jobs). ``fingerprint``: the worker fingerprint of
    the job's last claim; a task's running and done jobs pin the fingerprint its other jobs must
    run under, and the pin goes when none is left (a lapsed lease). ``sha256``: what the job
    returned (query vectors, or a shard's compact run with scores), kept in the state folder.
    ``deadline_at``: the attempt's deadline (``[sharding] deadline_s`` after it was planned; None
    for a job planned before the setting existed). ``used``: whether the current try's holder
    fetched the upload or renewed the lease; ``unused``: tries not charged, whose lease lapsed unused
    or whose query vectors were found suspect (charged tries are ``tries - unused``).
    """

    __tablename__ = "shard_jobs"
    __table_args__ = (UniqueConstraint("submission_id", "attempt", "task", "number", name="uq_shard_jobs_job"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    task: Mapped[str] = mapped_column(String(200))
    number: Mapped[int] = mapped_column(Integer)
    #: ``queued``, ``running``, ``done`` or ``failed``
    state: Mapped[str] = mapped_column(String(16), index=True)
    tries: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id"))
    lease_expires_at: Mapped[datetime | None]
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    sha256: Mapped[str | None] = mapped_column(String(64))
    failure_code: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")
    deadline_at: Mapped[datetime | None]
    used: Mapped[bool] = mapped_column(Boolean, default=False)
    unused: Mapped[int] = mapped_column(Integer, default=0)
    #: After a platform failure: not claimed before this (the backoff); None: at once.
    retry_at: Mapped[datetime | None] = mapped_column(default=None)
    #: When the job's first reported platform failure was: they are retried for ``[queue] infra_retry_s`` from it.
    infra_since: Mapped[datetime | None] = mapped_column(default=None)


class NotifySetting(Base):
    """A participant's notification addresses (grader.hosting.notify): a webhook and its HMAC secret, an e-mail address.

    The secret is stored as it is, not hashed: the server signs with it (a hash could not); the database is the host's
    alone (0600, like the keys), and the secret is shown to the participant once, when set.
    """

    __tablename__ = "notify_settings"
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), primary_key=True)
    webhook_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    webhook_secret: Mapped[str | None] = mapped_column(String(80), nullable=True)
    email: Mapped[str | None] = mapped_column(String(254), nullable=True)
    updated_at: Mapped[datetime]


class NotifyDelivery(Base):
    """One notification to deliver (the outbox): written in the transaction of its event, so none is lost across a crash.

    ``channel``: ``webhook`` or ``email``; ``address``: the URL or address when the event happened (a later change
    of the setting does not redirect it). ``facts``: the event (type, submission, states, time), never a score.
    ``next_at``: when the next try is due; ``done_at`` with ``outcome`` (``delivered`` or ``given up: ...``) ends it.
    """

    __tablename__ = "notify_deliveries"
    id: Mapped[int] = mapped_column(primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    channel: Mapped[str] = mapped_column(String(8))
    address: Mapped[str] = mapped_column(String(2048))
    facts: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    tries: Mapped[int] = mapped_column(Integer, default=0)
    next_at: Mapped[datetime]
    done_at: Mapped[datetime | None] = mapped_column(default=None)
    outcome: Mapped[str] = mapped_column(String(200), default="")

    __table_args__ = (Index("ix_notify_deliveries_due", "done_at", "next_at"),)
