"""The words of every refusal of a submission, in one place.

The server refuses with these (grader.hosting.intake.uploads on an upload's
headers, grader.hosting.intake.submissions, grader.hosting.intake.quotas), and
``grader submit`` refuses with the same ones locally, before it sends a byte of
the archive (grader.hosting.participant.client): same words, same exit status (4).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from grader.errors import GraderError
from grader.hosting.clock import iso
from grader.hosting.errors import ClientError, RefusedSubmission
from grader.hosting.states import Track


def plain(message: str, *roots: Path) -> str:
    """An error message without the folders ``roots`` (the server's temporary and state folders; the participant's
    submission folder), so that both sides say ``submission.json: ...``.

    Only paths under those roots are cut: a JSON pointer such as ``/training/datasets/1`` stays.
    """
    if not roots:
        return message[:500]
    prefixes = "|".join(re.escape(str(root).rstrip("/")) for root in sorted(roots, key=lambda r: -len(str(r))))
    return re.sub(rf"(?:{prefixes})(?:/[^\s:'\"]+)*/(?=[^/\s:'\"]+)", "", message)[:500]


@dataclass(frozen=True)
class QuotaStatus:
    """Counts and limits for one participant and track."""

    track: str
    used_24h: int
    per_day: int
    used_total: int | None
    total: int | None
    in_flight: int
    concurrent: int
    next_possible_at: datetime | None
    #: bytes of this participant's stored uploads (both tracks) and of its uploads still arriving (their declared length), and the
    #: competition's bound on them (None: not known, an older server's answer)
    stored_bytes: int = 0
    stored_limit: int | None = None
    #: the participant's refused uploads and its submissions ended by a platform failure in the last hour (both tracks),
    #: the competition's ``refusals_per_hour`` and ``infra_per_hour``, and when the count next drops (None: an older
    #: server's answer, which did not say)
    refused_last_hour: int = 0
    errors_last_hour: int = 0
    refusals_per_hour: int | None = None
    infra_per_hour: int | None = None
    refusals_drop_at: datetime | None = None
    #: CPU seconds the participant's grades of the last 24 h cost (both tracks; the workers' word), the competition's
    #: CPU-minute quota (None: none) and, at or past it, when enough drops out of the window
    cpu_s_24h: float = 0.0
    cpu_minutes_per_day: float | None = None
    cpu_next_at: datetime | None = None

    def as_dict(self) -> dict[str, object]:
        """The JSON form ``GET /api/v1/quota`` answers."""
        return {
            "track": self.track,
            "used_24h": self.used_24h,
            "per_day": self.per_day,
            "used_total": self.used_total,
            "total": self.total,
            "in_flight": self.in_flight,
            "concurrent": self.concurrent,
            "next_possible_at": iso(self.next_possible_at),
            "stored_bytes": self.stored_bytes,
            "stored_limit": self.stored_limit,
            "refused_last_hour": self.refused_last_hour,
            "errors_last_hour": self.errors_last_hour,
            "refusals_per_hour": self.refusals_per_hour,
            "infra_per_hour": self.infra_per_hour,
            "refusals_drop_at": iso(self.refusals_drop_at),
            "cpu_s_24h": self.cpu_s_24h,
            "cpu_minutes_per_day": self.cpu_minutes_per_day,
            "cpu_next_at": iso(self.cpu_next_at),
        }

    @classmethod
    def from_dict(cls, data: Any) -> QuotaStatus:
        """Read the JSON form back (a server's answer: every field type-checked; ClientError if it does not fit)."""
        if not isinstance(data, dict):
            raise ClientError("the server's quota answer: not an object")

        def count(key: str, *, optional: bool = False) -> Any:
            value = data.get(key)
            if value is None and optional:
                return None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ClientError(f"the server's quota answer: {key}: not a count")
            return value

        def seconds(key: str) -> float | None:
            value = data.get(key)
            if value is None:
                return None
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1e12:
                raise ClientError(f"the server's quota answer: {key}: not a number of seconds or minutes")
            return float(value)

        def moment(key: str) -> datetime | None:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise ClientError(f"the server's quota answer: {key}: not a date-time")
            return None if value is None else _moment(value, key)

        return cls(
            track=str(data.get("track", "")),
            used_24h=count("used_24h"),
            per_day=count("per_day"),
            used_total=count("used_total", optional=True),
            total=count("total", optional=True),
            in_flight=count("in_flight"),
            concurrent=count("concurrent"),
            next_possible_at=moment("next_possible_at"),
            stored_bytes=count("stored_bytes", optional=True) or 0,
            stored_limit=count("stored_limit", optional=True),
            refused_last_hour=count("refused_last_hour", optional=True) or 0,
            errors_last_hour=count("errors_last_hour", optional=True) or 0,
            refusals_per_hour=count("refusals_per_hour", optional=True),
            infra_per_hour=count("infra_per_hour", optional=True),
            refusals_drop_at=moment("refusals_drop_at"),
            cpu_s_24h=seconds("cpu_s_24h") or 0.0,
            cpu_minutes_per_day=seconds("cpu_minutes_per_day"),
            cpu_next_at=moment("cpu_next_at"),
        )


def _moment(text: str, key: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ClientError(f"the server's quota answer: {key}: not a date-time: {text[:40]!r}") from None


def too_large(size: int, cap: int) -> RefusedSubmission:
    """413: the archive is larger than the competition's upload cap."""
    return RefusedSubmission(f"upload of {size} bytes is larger than the competition's cap of {cap} bytes", status=413)


def invalid(error: GraderError, *roots: Path) -> RefusedSubmission:
    """422: the archive, manifest or model breaks a check or a competition rule (kind, training labels);
    ``roots``: the folders cut from the message (see :func:`plain`)."""
    return RefusedSubmission(f"invalid submission: {plain(str(error), *roots)}", status=422)


def no_sample_track() -> RefusedSubmission:
    """403: a ``--sample`` run of a competition without a sample split (its sample track is off)."""
    return RefusedSubmission(
        "this competition has no sample split: --sample runs are off (submit without --sample for a hidden-split grade)", status=403
    )


def track_refusal(track: str, sample_split: str | None) -> RefusedSubmission | None:
    """:func:`no_sample_track` for a sample run when the competition has no sample split (``sample_split`` None), else None."""
    return no_sample_track() if track == Track.SAMPLE and sample_split is None else None


def window_refusal(start: datetime, ends_at: datetime | None, now: datetime) -> RefusedSubmission | None:
    """403 before the start or after the end of the competition (None: a standing leaderboard, no end), else None."""
    if now < start:
        return RefusedSubmission(f"the competition opens at {iso(start)}", status=403, retry_at=start)
    if ends_at is not None and now >= ends_at:
        return closed(ends_at)
    return None


class PhaseWindow(Protocol):
    """A phase as the refusals read it: the server's :class:`grader.hosting.config.Phase`, or what a client read of one."""

    @property
    def name(self) -> str: ...
    @property
    def start(self) -> datetime: ...
    @property
    def end(self) -> datetime | None: ...


def named_phase_refusal(phases: Sequence[PhaseWindow], now: datetime, named: str | None, *, sample: bool) -> RefusedSubmission | None:
    """:func:`phase_refusal` of an upload meant for ``named`` (None: the open phase); sample runs are phase-independent."""
    if sample:
        return None if named is None else RefusedSubmission("sample runs belong to no phase: submit --sample without --phase", status=403)
    return phase_refusal(phases, now, named)


def _holds(phase: PhaseWindow, now: datetime) -> bool:
    return phase.start <= now and (phase.end is None or now < phase.end)


def phase_refusal(phases: Sequence[PhaseWindow], now: datetime, named: str | None = None) -> RefusedSubmission | None:
    """403 when the competition's ``phases`` accept nothing now (between two), or when ``named`` (``grader submit
    --phase``) is not the phase open now: before it opens nothing is accepted for it, after it closes its board is final.
    None for a competition without phases, or when the upload may go on (the window itself: :func:`window_refusal`)."""
    if not phases:
        return None if named is None else RefusedSubmission(f"this competition has no phases: submit without --phase ({named!r} given)", status=403)
    open_now = next((p for p in phases if _holds(p, now)), None)
    if named is not None:
        phase = next((p for p in phases if p.name == named), None)
        if phase is None:
            return RefusedSubmission(f"no phase {named!r} in this competition (its phases: {', '.join(p.name for p in phases)})", status=403)
        if now < phase.start:
            return RefusedSubmission(f"phase {phase.name!r} opens at {iso(phase.start)}", status=403, retry_at=phase.start)
        if phase is not open_now:
            return RefusedSubmission(f"phase {phase.name!r} closed at {iso(phase.end)}; its board is final", status=403)
        return None
    if open_now is None and phases[0].start <= now:
        upcoming = next((p for p in phases if now < p.start), None)
        if upcoming is not None:
            return RefusedSubmission(f"between phases: phase {upcoming.name!r} opens at {iso(upcoming.start)}", status=403, retry_at=upcoming.start)
    return None


def closed(ends_at: datetime) -> RefusedSubmission:
    """403: the competition closed at ``ends_at``."""
    return RefusedSubmission(f"the competition closed at {iso(ends_at)}; no further submissions are possible", status=403)


def count_refusal(status: QuotaStatus) -> RefusedSubmission | None:
    """403/429 when ``status``'s counts allow no further submission now (total, daily), else None."""
    if status.total is not None and status.used_total is not None and status.used_total >= status.total:
        return RefusedSubmission(
            f"total quota used: {status.used_total} of {status.total} submissions; no further submissions are possible", status=429
        )
    if status.used_24h >= status.per_day:
        if status.per_day == 0:
            return RefusedSubmission(f"{status.track} submissions are not allowed in this competition", status=403)
        retry = status.next_possible_at
        return RefusedSubmission(
            f"daily quota used: {status.used_24h} of {status.per_day} {status.track} submissions in the last 24 h; the next is possible at {iso(retry)}",
            status=429,
            retry_at=retry,
        )
    return cpu_refusal(status)


def cpu_refusal(status: QuotaStatus) -> RefusedSubmission | None:
    """429 when the participant's grades of the last 24 h cost the competition's CPU-minutes (``quotas.cpu_minutes_per_day``), else None."""
    limit = status.cpu_minutes_per_day
    if limit is None or status.cpu_s_24h < limit * 60:
        return None
    retry = status.cpu_next_at
    return RefusedSubmission(
        f"CPU quota used: your grades of the last 24 h cost {status.cpu_s_24h / 60:.1f} of {limit:g} CPU-minutes "
        f"(as the grading workers measured them); the next is possible at {iso(retry)}",
        status=429,
        retry_at=retry,
    )


def load_refusal(status: QuotaStatus, *, incoming_bytes: int = 0) -> RefusedSubmission | None:
    """429 when the stored uploads (with ``incoming_bytes``, the upload being admitted; 0 before it is read) or the
    submissions in flight reach their bound, else None."""
    limit = status.stored_limit
    if limit is not None and (status.stored_bytes + incoming_bytes > limit or (incoming_bytes == 0 and status.stored_bytes >= limit)):
        return RefusedSubmission(
            f"stored uploads: {status.stored_bytes} bytes of your uploads are kept, and this competition keeps at most {limit} "
            f"per participant{f'; this upload of {incoming_bytes} bytes does not fit' if incoming_bytes else ''}",
            status=429,
        )
    if status.in_flight >= status.concurrent:
        return RefusedSubmission(
            f"{status.in_flight} of your submissions are still being uploaded or graded (at most {status.concurrent} at once); the next is possible when one of them ends",
            status=429,
        )
    return None


def refusals_refusal(status: QuotaStatus) -> RefusedSubmission | None:
    """429 while the participant's refused uploads of the last hour, with its platform failures beyond
    ``infra_per_hour``, reach ``refusals_per_hour``; else None (also when the answer does not say: an older server)."""
    limit, infra = status.refusals_per_hour, status.infra_per_hour
    if limit is None or infra is None or status.refused_last_hour + max(0, status.errors_last_hour - infra) < limit:
        return None
    retry = status.refusals_drop_at
    return RefusedSubmission(
        f"too many refused uploads: {status.refused_last_hour} refused and {status.errors_last_hour} ended by a platform failure in the last hour "
        f"(at most {limit}, platform failures beyond {infra} counted); the next upload is possible at {iso(retry)}",
        status=429,
        retry_at=retry,
    )


def quota_refusal(status: QuotaStatus, *, incoming_bytes: int = 0) -> RefusedSubmission | None:
    """What the quota refuses, in the server's order: the counts, the refused uploads of the last hour, the load."""
    return count_refusal(status) or refusals_refusal(status) or load_refusal(status, incoming_bytes=incoming_bytes)


def refusal_line(status: int, detail: str, retry_at: str | None) -> str:
    """How ``grader submit`` prints a refusal, the server's or its own: ``refused (STATUS): DETAIL``."""
    return f"refused ({status}): {detail}" + (f" (next possible at {retry_at})" if retry_at else "")
