"""A posted result taken through the server's own path, its report given instead of scored from runs.

The path is the worker API's (:func:`grader.hosting.services.jobs.post_result`) without the scoring
process: :func:`~grader.hosting.results.recording.verify`, then a :class:`ScoredResult` of the given report
(parsed there, as the scorer's is), then :func:`~grader.hosting.results.recording.accept_result`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.hosting.db.session import Database
from grader.hosting.protocol.messages import Verdict, WorkerResult
from grader.hosting.results.recording import PartScorer, ScoredResult, accept_result, verify
from grader.hosting.storage import StateDir
from grader.hosting.transparency.host_log import HostLog


def accept_posted(
    db: Database,
    state: StateDir,
    key: Ed25519PrivateKey,
    *,
    submission_id: str,
    attempt: int,
    worker_id: int,
    payload: Mapping[str, Any],
    parts: PartScorer | None = None,
    blinding_key_id: str | None = None,
    host_log: HostLog | None = None,
) -> Verdict:
    """Post ``payload`` (a :class:`WorkerResult`'s fields, and optionally the ``report`` the server would have scored) for the attempt."""
    posted = WorkerResult(attempt=attempt, **{name: value for name, value in payload.items() if name != "report"})
    authentic = verify(db, worker_id, submission_id, posted)
    if isinstance(authentic, Verdict):
        return authentic
    scored = ScoredResult.of_report(authentic, dict(payload["report"])) if "report" in payload else ScoredResult.unscored(authentic)
    return accept_result(db, state, key, scored, parts=parts, blinding_key_id=blinding_key_id, host_log=host_log)
