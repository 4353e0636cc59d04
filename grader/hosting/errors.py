"""Errors of the hosting layer (part of the one hierarchy rooted at :class:`GraderError`)."""

from __future__ import annotations

from datetime import datetime

from grader.errors import GraderError, InputError


class CompetitionFileError(InputError):
    """The competition file is unreadable or breaks its schema; the message names the key."""


class HostingError(GraderError):
    """A hosting operation cannot be done (state folder, database, pins)."""


class NotPublished(HostingError):
    """What was asked for is not published yet (the private board before the end): the routes answer 404."""


class PinMismatch(HostingError):
    """The benchmark data or the grader version differ from what the competition pinned."""


class LostRace(HostingError):
    """Another writer moved a submission between the read and the compare-and-set of a transaction, which then rolls back."""


class WorkerProtocolMismatch(HostingError):
    """A worker and the server speak different worker protocols (:mod:`grader.hosting.protocol.version`); the line names both."""


class ShardOutputRefused(HostingError):
    """A shard job's output did not hold when it was put (query vectors, a shard's run): the route answers 422 in one
    line; the job's try has failed ``INFRA`` (re-run alone: a worker's fault, never the participant's)."""


class RefusedSubmission(GraderError):
    """The server refused a submission (quota, window, size, invalid upload); says when to try again."""

    def __init__(self, message: str, *, status: int = 422, retry_at: datetime | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.retry_at = retry_at


class ClientError(GraderError):
    """``grader submit/status/submissions`` could not talk to the server or got an error answer."""


class UnknownSubmission(ClientError):
    """The server knows no submission of yours by that id (404): its own exit status, apart from "unreachable"."""


class UploadInProgress(RefusedSubmission):
    """Another copy of this upload (same ``Idempotency-Key``) is still arriving or being checked: 409, its body
    unread, with ``retry_at`` when that copy counts as stalled unless it shows progress meanwhile."""

    def __init__(self, message: str, *, retry_at: datetime) -> None:
        super().__init__(message, status=409, retry_at=retry_at)


class UploadTakenOver(RefusedSubmission):
    """This copy of an upload lost its reservation (a retry under its key took over a stalled copy, or it expired): it stops reading."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=409)


class NotifySettingRefused(HostingError):
    """A participant's webhook URL or e-mail address is not one the server sends to (scheme, length, form): 422."""


class NotifyTestLimited(HostingError):
    """A participant asked for more test notifications than an hour allows (each is a request the server sends): 429."""


class DeliveryFailed(HostingError):
    """One try of a notification did not deliver: refused by the address guard, unreachable, or not answered 2xx.
    The message names why in one line and never carries the secret or the body."""


class TeamRefused(HostingError):
    """A team change the rules refuse: the merge deadline passed, already in a team, the team full, a join that would
    pass the team's quota, a name taken or not printable: 409."""


class TeamNotFound(HostingError):
    """Nothing of a team to act on (404): the competition has no teams, the caller is in none, or an invitation code
    is no team's (never issued, already taken, or expired: one answer for all three)."""
