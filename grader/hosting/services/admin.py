"""The host's commands (``grader admin``), as services: each opens and commits its own transaction.

Each is named as its command; the context functions they call are named for the record they change
(``participants.create_participant``, ``workers.mark_worker_revoked``, ``lifecycle.cancel_submission``...),
so that a reader tells the command from the step.

The CLI only parses options, calls one of these and prints; rows come back as the frozen
dataclasses below (the host view: every participant, submission and worker).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import func, select

from grader import __version__
from grader.hosting.clock import iso, utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Participant, Result, Setting, State, Submission, Transition, Worker
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.identity import participants, workers
from grader.hosting.keyring.files import key_files
from grader.hosting.queue.dispatch import LocalDispatcher
from grader.hosting.queue.lifecycle import cancel_submission, rejudge_submission
from grader.hosting.results import pins
from grader.hosting.schedule import ENDED_AT_KEY, has_ended
from grader.hosting.services import fingerprints, replication
from grader.hosting.states import Track
from grader.hosting.transparency.host_log import HostLog, identifier_key
from grader.hosting.transparency.log_events import (
    AlreadyRevealed,
    RevealNotDue,
    head_index,
    log_end,
    log_retraction,
    log_reveal,
    logged_end,
    refuse_after_reveal,
    reveal_due,
)
from grader.hosting.transparency.log_store import append_entry, flat_digests
from grader.hosting.transparency.log_store import rewind as log_rewind
from grader.hosting.visibility import Part
from grader.transparency import entries

if TYPE_CHECKING:
    from grader.hosting.leaderboard.board import BoardInputs
    from grader.hosting.services.retention import RunsPlan


def add_participant(db: Database, name: str, team: str | None, *, baseline: bool) -> str:
    """Create participant ``name``; return its token (shown once; only its digest is stored)."""
    with db.session() as session:
        _participant, token = participants.create_participant(session, name, team, baseline=baseline)
    return token


def revoke_participant(db: Database, name: str) -> None:
    """Revoke participant ``name``'s token (their submissions stay)."""
    with db.session() as session:
        participants.mark_participant_revoked(session, name)


@dataclass(frozen=True)
class ParticipantRow:
    """A participant as the host lists them (``grader admin list``; its ``--json`` prints the fields in this order)."""

    name: str
    team: str | None
    revoked: bool
    baseline: bool
    submissions: int
    created_at: str | None


@dataclass(frozen=True)
class SubmissionRow:
    """A submission as the host lists it (``grader admin submissions``)."""

    id: str
    participant: str
    name: str
    track: Track
    state: State
    failure_code: str | None
    attempt: int
    #: the public part's score of a hidden grade (unrounded: the host's view), a sample run's whole score
    score: float | None
    uploaded_at: str | None


@dataclass(frozen=True)
class WorkerRow:
    """A registered worker as the host lists it (``grader admin workers``)."""

    name: str
    local: bool
    #: whether a public key is recorded (remote workers sign their results with it)
    key: bool
    revoked: bool
    #: jobs it holds the lease of now
    running: int
    #: the digest of the fingerprint bound to it (stated once; ``grader admin reset-fingerprint`` clears it)
    fingerprint: str | None
    #: claims and statements refused for naming another fingerprint (or an unsigned statement), and the digest the last one named
    fingerprint_refusals: int
    fingerprint_refused: str | None
    #: replicas it graded, and how many disagreed with their job's majority (the host's flag)
    replicas: int
    dissents: int
    #: its re-runs of an outvoted replica that gave two outputs for one input (not a flag: the grade ended NONDETERMINISTIC)
    nondeterministic: int


@dataclass(frozen=True)
class TransitionRow:
    """One move of a submission's audit trail (``grader admin history``)."""

    from_state: str | None
    to_state: str
    attempt: int
    actor: str
    reason: str
    at: str | None


def participant_rows(db: Database) -> list[ParticipantRow]:
    """Every participant with their submission count."""
    with db.session() as session:
        rows = []
        for p in session.scalars(select(Participant).order_by(Participant.name)).all():
            count = session.scalar(select(func.count()).select_from(Submission).where(Submission.participant_id == p.id)) or 0
            rows.append(
                ParticipantRow(
                    name=p.name,
                    team=p.team,
                    revoked=p.revoked_at is not None,
                    baseline=p.is_baseline,
                    submissions=count,
                    created_at=iso(p.created_at),
                )
            )
        return rows


def submission_rows(db: Database) -> list[SubmissionRow]:
    """Every submission with its state, oldest first."""
    with db.session() as session:
        return [
            SubmissionRow(
                id=s.id,
                participant=p.name,
                name=s.name,
                track=s.track,
                state=s.state,
                failure_code=s.failure_code,
                attempt=s.attempt,
                score=s.public_score,
                uploaded_at=iso(s.uploaded_at),
            )
            for s, p in session.execute(select(Submission, Participant).join(Participant).order_by(Submission.uploaded_at)).all()
        ]


def history(db: Database, submission_id: str) -> list[TransitionRow]:
    """The audit trail of one submission, oldest first."""
    with db.session() as session:
        rows = session.scalars(select(Transition).where(Transition.submission_id == submission_id).order_by(Transition.id)).all()
        names = {worker_id: name for worker_id, name in session.execute(select(Worker.id, Worker.name))}
        return [
            TransitionRow(
                from_state=r.from_state, to_state=r.to_state, attempt=r.attempt, actor=_actor(r.actor, names), reason=r.reason, at=iso(r.at)
            )
            for r in rows
        ]


def _actor(actor: str, worker_names: dict[int, str]) -> str:
    """A transition's actor as people read it: a worker by the name reports give it (``graded_by``), not its row id.

    Transitions store ``worker:<id>``; the workers table names it.
    """
    kind, _, number = actor.partition(":")
    if kind == "worker" and number.isdigit() and int(number) in worker_names:
        return f"worker {worker_names[int(number)]}"
    return actor


def rejudge(db: Database, submission_id: str | None, *, max_attempts: int, host_log: HostLog | None = None) -> tuple[list[str], list[str]]:
    """Queue ``submission_id`` (None: every scored or failed submission) again; (queued, not finished or unknown).

    Refused after the reveal: the final boards it published would change under everyone who checked them.
    """
    refuse_after_reveal(db, "a rejudge")
    with db.session() as session:
        ids = (
            [submission_id]
            if submission_id
            else list(session.scalars(select(Submission.id).where(Submission.state.in_([State.SCORED.value, State.FAILED.value]))).all())
        )
    dispatcher = LocalDispatcher()  # the server's workers poll the database; the reaper re-dispatches
    done = [sid for sid in ids if sid and rejudge_submission(db, dispatcher, sid, max_attempts=max_attempts, host_log=host_log)]
    return done, sorted(set(ids) - set(done))


def cancel(db: Database, submission_id: str, *, host_log: HostLog | None = None) -> None:
    """Cancel a submission that has not ended (never charged); logged with the cancellation."""
    if not cancel_submission(db, submission_id, host_log=host_log):
        raise HostingError(f"{submission_id}: unknown or already finished")


def end_now(db: Database, *, host_log: HostLog | None = None, competition: Competition | None = None) -> datetime:
    """End the competition now (an ``end`` entry in the log, in the same transaction); uploads completed before this moment still count.

    Ending twice keeps the first end: moving it later would re-open a window whose secret is already public. So does
    ending after the file's ``end`` was logged (by a server's reaper): that end stays the end, and no early end of the
    host's is stored over it (a server would then take a file whose ``end`` moved later for an early end).

    With ``competition``, the ends of its earlier phases that have come are logged first, as the reaper would have:
    an end in the seconds between a phase's end and the reaper's next pass must not take that phase's carried choices
    for final ones (the ``finals`` entries leave out the choices made before the last ``phase_end``).
    """
    if host_log is not None and competition is not None:
        from grader.hosting.services.phase_close import log_phase_ends_if_due  # the phases' closing is that module's

        log_phase_ends_if_due(db, host_log, competition)
    now = utcnow()
    with db.session() as session:
        setting = session.get(Setting, ENDED_AT_KEY)
        if setting is not None:
            return datetime.fromisoformat(setting.value)
        logged = logged_end(session)
        if logged is not None:
            return logged[1]
        session.add(Setting(key=ENDED_AT_KEY, value=now.isoformat()))
        if host_log is not None:
            log_end(session, host_log, now)
    return now


def repin(db: Database, competition: Competition, *, host_log: HostLog | None = None) -> str:
    """Pin the data and grader as they are now (a ``repin`` entry in the log, same transaction); a line saying what was pinned."""
    with db.session() as session:
        pin = pins.repin(session, competition)
        if host_log is not None:
            try:
                competition_sha256 = hashlib.sha256(competition.path.read_bytes()).hexdigest()
            except OSError as error:
                raise HostingError(f"{competition.path}: cannot read the competition file: {error.strerror or error}") from None
            entry = entries.repin_entry(
                time=utcnow(), data_digests=flat_digests(pin.digests), grader_version=__version__, competition_sha256=competition_sha256
            )
            append_entry(session, host_log, entry)
        return f"pinned grader {pin.grader_version}, benchmark {pin.digests.get('benchmark')} {pin.digests.get('version')} (pin {pin.id})"


def full_report(db: Database, submission_id: str) -> bytes:
    """The full signed report of a submission's current result (host view, any time)."""
    with db.session() as session:
        submission = session.get(Submission, submission_id)
        result = session.get(Result, submission.result_id) if submission is not None and submission.result_id else None
        path = None if result is None else result.envelope_path
    if path is None:
        raise HostingError(f"{submission_id}: no signed report")
    return Path(path).read_bytes()


def add_worker(db: Database, name: str, public_key: str | None) -> str:
    """Register remote worker ``name``; return its token (shown once)."""
    with db.session() as session:
        _worker, token = workers.create_worker(session, name, public_key)
    return token


def revoke_worker(db: Database, name: str) -> None:
    """Revoke remote worker ``name``."""
    with db.session() as session:
        workers.mark_worker_revoked(session, name)


def reset_fingerprint(db: Database, name: str) -> str | None:
    """Clear the fingerprint bound to worker ``name`` (its next statement binds anew); the digest that was bound."""
    return fingerprints.reset(db, name)


def worker_rows(db: Database) -> list[WorkerRow]:
    """Registered workers: local or remote, key recorded, jobs running now, bound fingerprint and refusals, replicas and dissents."""
    with db.session() as session:
        rows = []
        for w in session.scalars(select(Worker).order_by(Worker.name)).all():
            running = (
                session.scalar(
                    select(func.count()).select_from(Submission).where(Submission.lease_worker_id == w.id, Submission.state == State.RUNNING.value)
                )
                or 0
            )
            standing = replication.worker_standing(session, w.id)
            rows.append(
                WorkerRow(
                    name=w.name,
                    local=w.local,
                    key=w.public_key is not None,
                    revoked=w.revoked_at is not None,
                    running=running,
                    fingerprint=w.fingerprint,
                    fingerprint_refusals=w.fingerprint_refusals,
                    fingerprint_refused=w.fingerprint_refused,
                    replicas=standing["replicas"],
                    dissents=standing["dissents"],
                    nondeterministic=standing["nondeterministic"],
                )
            )
        return rows


def retract(db: Database, host_log: HostLog | None, *, index: int, admin: str, reason: str) -> int:
    """Append a retraction of log entry ``index`` (never a deletion); its own index."""
    if host_log is None:
        raise HostingError("this state folder has no transparency log yet (start `grader serve` once)")
    return log_retraction(db, host_log, index=index, admin=admin, reason=reason)


def rewind(db: Database, host_log: HostLog | None, note: bytes, *, admin: str, reason: str) -> tuple[int, bytes]:
    """A deliberate, signed and logged rewind of the log to the database's state (:func:`grader.hosting.transparency.log_store.rewind`)."""
    if host_log is None:
        raise HostingError("this state folder has no transparency log yet (start `grader serve` once)")
    return log_rewind(db, host_log, note, admin=admin, reason=reason)


def reveal(db: Database, host_log: HostLog | None, state_dir: Path, competition: Competition) -> int:
    """Log the reveal once grading after the end is done: every key entry 0 committed to, and the final boards' digests."""
    if host_log is None:
        raise HostingError("this state folder has no transparency log yet (start `grader serve` once)")
    if not has_ended(db, competition):
        raise HostingError("the competition has not ended: the reveal comes after `grader admin end` (or the file's end)")
    from grader.hosting.keyring.blinding_key import ensure_competition_blinding_key
    from grader.hosting.keyring.partition_secret import load_partition_secret
    from grader.hosting.leaderboard.host_view import board_sha256  # the boards' statistics (numpy, scipy): only the reveal pays for them

    keys = key_files(state_dir).folder
    secret = load_partition_secret(keys)
    head = head_index(db)  # before the boards are read: log_reveal refuses them if a grade was logged meanwhile
    entry = entries.reveal_entry(
        time=utcnow(),
        partition_secret=secret,
        identifier_key=identifier_key(secret),
        blinding_key=ensure_competition_blinding_key(keys).secret,
        public_board_sha256=board_sha256(state_dir, db, competition, Part.PUBLIC),
        private_board_sha256=board_sha256(state_dir, db, competition, Part.PRIVATE),
    )
    return log_reveal(db, host_log, entry, head=head)


def reveal_when_due(db: Database, host_log: HostLog | None, state_dir: Path, competition: Competition) -> int | None:
    """The server's periodic pass: log the reveal once the end is logged and no submission received before it is in
    flight; the reveal's index, or None when it is not due (or another server process, or the host, logged it first).

    Safe with several server processes on one database: :func:`log_reveal` checks under the log's head lock, so
    exactly one reveal is appended; a pass that lost the race computed its boards for nothing.
    """
    if host_log is None or not reveal_due(db):
        return None
    try:
        return reveal(db, host_log, state_dir, competition)
    except (AlreadyRevealed, RevealNotDue):
        return None  # lost the race, or a rejudge began meanwhile: the next pass asks again


def _board_inputs(state_dir: Path, competition: Competition) -> BoardInputs | None:
    """The board inputs (host public key, partition secret) a ladder board's retention needs; None when the keys are not there."""
    from grader.errors import GraderError
    from grader.hosting.keyring.partition_secret import load_partition_secret
    from grader.hosting.leaderboard.board import BoardInputs
    from grader.reports.keys import load_public_key

    keys = key_files(state_dir)
    try:
        return BoardInputs.of(competition, load_public_key(keys.host_public), load_partition_secret(keys.folder))
    except (GraderError, OSError, ValueError):
        return None


def runs_plan(db: Database, state_dir: Path, competition: Competition) -> RunsPlan:
    """The compact runs held and what the competition's retention policy removes of them (``grader admin runs``)."""
    from grader.hosting.services.retention import plan
    from grader.hosting.storage import StateDir

    laddered = competition.leaderboard.ladder or any(phase.leaderboard.ladder for phase in competition.phases)
    board = _board_inputs(state_dir, competition) if laddered else None
    return plan(db, StateDir(state_dir), competition, board)


def rescore(
    db: Database, state_dir: Path, competition: Competition, submission_id: str | None, *, host_log: HostLog | None = None
) -> tuple[list[tuple[str, int, float | None]], list[str]]:
    """Re-score ``submission_id``'s (None: every finished submission's) stored runs; ((id, new result, score) done, refusals).

    One submission: its refusal raises :class:`HostingError`; with None each refusal is one line of the second list.
    Refused whole after the reveal, as a rejudge is.
    """
    refuse_after_reveal(db, "a re-scoring")
    from grader.hosting.keyring.blinding_key import ensure_competition_blinding_key
    from grader.hosting.keyring.partition_secret import load_partition_secret, recorded_commitment
    from grader.hosting.leaderboard.parts import PartitionScorer
    from grader.hosting.results.rescore import Rescorer, rescorable
    from grader.hosting.results.rescore import rescore as rescore_one
    from grader.hosting.storage import StateDir

    state = StateDir(state_dir)
    keys = state.keys
    with db.session() as session:
        commitment = recorded_commitment(session) or ""
    rescorer = Rescorer(
        db,
        state,
        state.ensure_host_key(),
        competition,
        parts=PartitionScorer(load_partition_secret(keys), competition.leaderboard.public_fraction, commitment),
        blinding_key_id=ensure_competition_blinding_key(keys).key_id,
        host_log=host_log,
    )
    if submission_id is not None:
        result_id, score = rescore_one(rescorer, submission_id)
        return [(submission_id, result_id, score)], []
    done: list[tuple[str, int, float | None]] = []
    refused: list[str] = []
    for sid in rescorable(db):
        try:
            done.append((sid, *rescore_one(rescorer, sid)))
        except HostingError as error:
            refused.append(str(error))
    return done, refused
