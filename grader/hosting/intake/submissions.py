"""Turning a complete upload into a submission, and what a participant may see of one.

Order matters: the upload was admitted on its headers and holds a reservation
(:mod:`grader.hosting.intake.uploads`); it is checked (the same code as
``grader check`` steps 1-2, unpacking within the competition's ratio and cap),
renamed to a server-chosen name, then the row is committed in ``received`` in
place of the reservation, then moved to ``queued`` and dispatched. A crash between any two
steps leaves either nothing (the start-up clean-up removes the file) or a
``received`` row that the reaper queues.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select

from grader.errors import GraderError
from grader.files import atomic_write_bytes
from grader.hosting.clock import iso, utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Result, ResultPart, Submission, UploadReservation
from grader.hosting.errors import UploadTakenOver
from grader.hosting.identity import teams
from grader.hosting.identity.principal import Principal
from grader.hosting.intake.quotas import check_quota, lock_admission, quota_status, record_refusal
from grader.hosting.intake.refusals import closed, invalid, track_refusal
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.intake.upload_checks import check_submission
from grader.hosting.protocol.messages import Quota, QuotaView, SubmissionView
from grader.hosting.queue.lifecycle import enqueue, new_submission_id, record_received
from grader.hosting.schedule import ends_at, is_disclosed
from grader.hosting.states import Track
from grader.hosting.storage import StoredUpload
from grader.hosting.transparency.log_events import end_logged_first, log_receipt
from grader.hosting.visibility import Download, logs_visible, report_download
from grader.integrity.sketch_file import encode
from grader.submissions.archive import unpack_limits
from grader.submissions.manifest import Manifest, OnnxManifest


def create_submission(
    ctx: ServerContext,
    participant: Principal,
    track: str,
    upload: StoredUpload,
    *,
    idempotency_key: str | None = None,
    reservation_key: str | None = None,
    holder: str | None = None,
) -> tuple[Submission, bool]:
    """Check the upload and commit it as a queued submission, in place of its reservation; the upload file is consumed either way.

    Returns the submission and True, or, when another copy of the same upload (same
    ``idempotency_key``) committed meanwhile, that one's submission and False. With a
    ``holder``, only the copy that still holds the reservation commits
    (:class:`UploadTakenOver` otherwise: a retry took it over, and that copy's body is the one that counts).
    """
    uploaded_at = utcnow()  # the deadline is judged on the completion of the upload
    # a hidden grade belongs to the phase open when its upload completed (the deadline's rule): its kinds and quotas
    competition = ctx.competition.in_phase(ctx.competition.phase_at(uploaded_at)) if track == Track.HIDDEN else ctx.competition
    try:
        if (refusal := track_refusal(track, ctx.sample_split)) is not None:
            raise refusal  # admitted on its headers already (uploads.admit): here for any other caller
        limits = unpack_limits(upload.size, ratio=competition.unpack.max_unpack_ratio, cap=competition.unpack.max_unpacked_bytes)
        try:
            checked = check_submission(
                upload.path, kinds=competition.kinds, require_training_labels=competition.require_training_labels, limits=limits
            )
        except GraderError as error:
            with ctx.db.session() as session:  # counted: a participant may not have uploads unpacked and refused without bound
                lock_admission(session, participant.id)
                record_refusal(session, competition, participant.id, uploaded_at)
            raise invalid(error, Path(tempfile.gettempdir()).resolve(), Path(tempfile.gettempdir()), ctx.state.root) from None
        submission_id = new_submission_id()
        final_path = ctx.state.upload_path(submission_id)
        end = ends_at(ctx.db, ctx.competition)
        with ctx.db.session() as session:
            lock_admission(session, participant.id)  # count and insert in one serialised transaction, whatever the number of servers
            team_id = teams.team_of(session, participant.id)  # under the lock: a join or leave now waits for this upload
            if idempotency_key is not None:
                earlier = session.scalar(
                    select(Submission).where(Submission.participant_id == participant.id, Submission.idempotency_key == idempotency_key)
                )
                if earlier is not None:
                    return earlier, False
            if reservation_key is not None:  # the reservation becomes the submission: it no longer counts on its own
                mine = [UploadReservation.participant_id == participant.id, UploadReservation.idempotency_key == reservation_key]
                if holder is not None:
                    mine.append(UploadReservation.holder == holder)
                dropped = session.execute(delete(UploadReservation).where(*mine))
                if holder is not None and dropped.rowcount != 1:  # type: ignore[attr-defined]
                    raise UploadTakenOver(
                        "this copy of the upload lost its reservation to a retry under its key (or it expired) before it could commit"
                    )
            check_quota(session, competition, participant.id, track, uploaded_at, end, incoming_bytes=upload.size)
            if ctx.log is not None and (logged := end_logged_first(session)) is not None:
                raise closed(logged)  # the end was logged while this upload was checked: its receipt would follow the end
            os.replace(upload.path, final_path)
            sketch_sha256 = None
            if checked.training_sketch is not None and track == Track.HIDDEN:
                # kept apart, checked, for the server's audit at scoring (the upload itself is only ever read by workers);
                # its digest goes into the row, so that the audit reads only the file the server wrote
                sketch_bytes = encode(checked.training_sketch)
                atomic_write_bytes(ctx.state.sketch_path(submission_id), sketch_bytes)
                sketch_sha256 = hashlib.sha256(sketch_bytes).hexdigest()
            submission = received_submission(
                submission_id=submission_id,
                participant_id=participant.id,
                team_id=team_id,
                pin_id=ctx.pin_id,
                name=checked.name,
                kind=checked.kind,
                track=track,
                split=_graded_split(ctx, track, uploaded_at),
                upload_path=final_path.name,
                upload_sha256=upload.sha256,
                upload_bytes=upload.size,
                content_digest=checked.digest,
                uploaded_at=uploaded_at,
                attempt_limit=competition.max_attempts,
                labels=manifest_labels(checked.manifest),
                idempotency_key=idempotency_key,
                sketch_sha256=sketch_sha256,
            )
            record_received(session, submission)
            if ctx.log is not None:
                log_receipt(session, ctx.log, submission)
    finally:
        upload.path.unlink(missing_ok=True)
    enqueue(ctx.db, ctx.dispatcher, submission.id, actor="upload", reason="upload checked and stored")
    return submission, True


def _graded_split(ctx: ServerContext, track: str, uploaded_at: datetime) -> str:
    """The split a submission is graded on: the sample split for a sample run; else the open phase's, or the competition's."""
    if track != Track.HIDDEN:
        return str(ctx.sample_split)
    phase = ctx.competition.phase_at(uploaded_at)
    return ctx.split if phase is None or phase.split is None else phase.split


def manifest_labels(manifest: Manifest) -> dict[str, Any]:
    """What the leaderboard shows of a manifest: the declared training setting and data, and the model facts."""
    facts = dict(manifest.model_card)
    if isinstance(manifest, OnnxManifest):
        facts.setdefault("max_length", manifest.max_length)
    return {**manifest.training.as_labels(), "model": facts}


def public_view(
    ctx: ServerContext, submission: Submission, *, ended: bool, loaded: tuple[Result | None, ResultPart | None] | None = None
) -> SubmissionView:
    """What the submitting participant may see: state and failure code always; the public-part aggregate
    (rounded to 4 decimals) for hidden-split grades, private and full scores after the end; for sample-split
    runs their score and the last log line. Whether its report can be downloaded is :mod:`grader.hosting.visibility`'s rule.
    ``loaded``: its current result and part scores, read with it (:func:`own_views`); None: read here."""
    # a grade of a phase over public test data is disclosed at once, whatever the competition's (docs/hosting.md#phases)
    ended = ended or (submission.track == Track.HIDDEN and ctx.competition.rules_at(submission.uploaded_at).public_data)
    result = result_of(ctx, submission) if loaded is None else loaded[0]
    view: dict[str, Any] = {
        "id": submission.id,
        "name": submission.name,
        "kind": submission.kind,
        "track": submission.track,
        "split": submission.split,
        "state": submission.state,
        "failure_code": submission.failure_code,
        "uploaded_at": iso(submission.uploaded_at),
        "updated_at": iso(submission.updated_at),
        "sha256": submission.upload_sha256,
        "report_available": report_download(
            track=submission.track,
            result_state=None if result is None or result.envelope_path is None else result.state,
            ended=ended,
            ladder=ctx.competition.rules_at(submission.uploaded_at).leaderboard.ladder,  # its phase's Ladder
        )
        is not Download.NONE,
    }
    # Of a hidden grade: the public part's score until the end (grader.hosting.leaderboard), never the full split's.
    from grader.hosting.leaderboard.service import submission_scores

    view.update(submission_scores(ctx, submission, ended=ended, loaded=loaded))
    if submission.track == Track.SAMPLE:
        view["last_log_line"] = last_log_line(ctx, submission)
    return SubmissionView(**view)


def result_of(ctx: ServerContext, submission: Submission) -> Result | None:
    """The submission's current accepted result."""
    if submission.result_id is None:
        return None
    with ctx.db.session() as session:
        return session.get(Result, submission.result_id)


def sample_logs(ctx: ServerContext, submission: Submission) -> dict[str, str]:
    """Container logs of a sample-split run (none of a hidden grade)."""
    if not logs_visible(submission.track):
        return {}
    result = result_of(ctx, submission)
    if result is None or result.logs_path is None:
        return {}
    folder = Path(result.logs_path)
    return {path.stem: path.read_text(encoding="utf-8", errors="replace") for path in sorted(folder.glob("*.log"))}


def last_log_line(ctx: ServerContext, submission: Submission) -> str | None:
    """The last non-empty log line of a sample-split run."""
    for text in reversed(list(sample_logs(ctx, submission).values())):
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            return lines[-1][-500:]
    return None


def own_submission(ctx: ServerContext, participant: Principal, submission_id: str) -> Submission | None:
    """The submission if ``participant`` may read it: theirs, or their team's (else None: the route answers 404, not 403)."""
    if len(submission_id) > 40:
        return None
    with ctx.db.session() as session:
        # the caller's own outside any team, or their team's: anyone else's is answered as if it did not exist
        return session.scalar(select(Submission).where(Submission.id == submission_id, teams.visible(session, participant.id)))


def own_view(ctx: ServerContext, participant: Principal, submission_id: str) -> SubmissionView | None:
    """What ``participant`` may see of their submission ``submission_id`` (None if it is not theirs: the route answers 404)."""
    submission = own_submission(ctx, participant, submission_id)
    return None if submission is None else public_view(ctx, submission, ended=is_disclosed(ctx.db, ctx.competition))


def own_views(ctx: ServerContext, participant: Principal, *, ended: bool | None = None) -> list[SubmissionView]:
    """What ``participant`` may see of each of their submissions, newest first (the end read once for all of them,
    unless the caller read it: ``ended``). Each submission's result and part scores are read with it, in one query: a
    list of dozens of grades would otherwise open two transactions per grade."""
    if ended is None:
        ended = is_disclosed(ctx.db, ctx.competition)
    with ctx.db.session() as session:
        rows = session.execute(
            select(Submission, Result, ResultPart)
            .outerjoin(Result, Result.id == Submission.result_id)
            .outerjoin(ResultPart, ResultPart.result_id == Submission.result_id)
            .where(teams.visible(session, participant.id))
            .order_by(Submission.uploaded_at.desc())
        ).all()
    return [public_view(ctx, s, ended=ended, loaded=(result, parts)) for s, result, parts in rows]


def quota(ctx: ServerContext, participant: Principal) -> Quota:
    """The participant's quota per track: used, limits, and when the next submission is possible."""
    now = utcnow()
    with ctx.db.session() as session:

        def on(track: Track) -> QuotaView:
            return QuotaView.model_validate(quota_status(session, ctx.competition, participant.id, track, now).as_dict())

        return Quota(hidden=on(Track.HIDDEN), sample=on(Track.SAMPLE))
