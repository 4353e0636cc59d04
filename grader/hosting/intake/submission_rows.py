"""The one constructor of a new submission row: what an upload becomes before it enters the lifecycle.

The service (:func:`grader.hosting.intake.submissions.create_submission`) and the tests build rows here, so a
column added to :class:`~grader.hosting.db.models.Submission` gets its starting value in one place. The row
starts in ``received`` with no attempt, no lease and no result; :func:`grader.hosting.queue.lifecycle.record_received`
inserts it with its first audit row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from grader.hosting.db.models import Submission
from grader.hosting.states import State


def received_submission(
    *,
    submission_id: str,
    participant_id: int,
    team_id: int | None = None,
    pin_id: int,
    name: str,
    kind: str,
    track: str,
    split: str,
    upload_path: str,
    upload_sha256: str,
    upload_bytes: int,
    content_digest: str,
    uploaded_at: datetime,
    attempt_limit: int,
    labels: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    sketch_sha256: str | None = None,
) -> Submission:
    """A new, not yet inserted submission row in ``received``: the upload's facts, and every job column at its start."""
    return Submission(
        id=submission_id,
        participant_id=participant_id,
        team_id=team_id,
        name=name,
        kind=kind,
        track=track,
        split=split,
        state=State.RECEIVED,
        failure_code=None,
        upload_path=upload_path,
        upload_sha256=upload_sha256,
        upload_bytes=upload_bytes,
        content_digest=content_digest,
        uploaded_at=uploaded_at,
        updated_at=uploaded_at,
        dispatched_at=None,
        attempt=0,
        attempt_limit=attempt_limit,
        lease_worker_id=None,
        lease_expires_at=None,
        version=0,
        pin_id=pin_id,
        public_score=None,
        result_id=None,
        labels=labels,
        idempotency_key=idempotency_key,
        sketch_sha256=sketch_sha256,
    )
