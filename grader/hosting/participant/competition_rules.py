"""What a participant's tools need of a competition: limits, kinds, rules, upload cap and window.

Read from a competition file (the host's TOML) or from a server's
``GET /api/v1/competition``; ``grader check --competition`` checks against it,
``grader submit`` refuses locally what the server would refuse
(:mod:`grader.hosting.intake.refusals`). A server's answer is untrusted input: every
field used is type-checked, and a misfit is one :class:`ClientError` line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition, load_competition
from grader.hosting.errors import ClientError
from grader.sandbox.limits import SandboxLimits

COMPETITION_PATH = "/api/v1/competition"
#: A competition document is a few kilobytes; anything past this is not one.
MAX_ANSWER_BYTES = 1 << 20
_LIMIT_FIELDS = {f.name: f.type for f in dataclasses.fields(SandboxLimits)}


@dataclass(frozen=True)
class PhaseRules:
    """One phase as a participant's tools see it: its name and window (docs/hosting.md#phases)."""

    name: str
    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class ParticipantRules:
    """A competition as a participant's tools see it, and where it was read from."""

    source: str
    name: str
    benchmark: str
    tasks: tuple[str, ...] | None
    kinds: tuple[str, ...]
    require_training_labels: bool
    upload_max_bytes: int
    limits: SandboxLimits
    start: datetime
    #: None: a standing leaderboard (no end)
    end: datetime | None
    #: Whether ``--sample`` runs are on: the server names a sample split (an older server always did).
    sample_track: bool = True
    #: The phases, in order (none: a competition without phases, or an older server)
    phases: tuple[PhaseRules, ...] = ()

    @classmethod
    def from_competition(cls, competition: Competition) -> ParticipantRules:
        """From a validated competition file (with phases: the rules of the phase open now)."""
        competition = competition.in_phase(competition.phase_at(utcnow()))
        return cls(
            source=f"the competition file {competition.path}",
            name=competition.name,
            benchmark=competition.benchmark_target(),
            tasks=competition.tasks,
            kinds=competition.kinds,
            require_training_labels=competition.require_training_labels,
            upload_max_bytes=competition.upload_max_bytes,
            limits=competition.limits,
            start=competition.start,
            end=competition.end,
            phases=tuple(PhaseRules(p.name, p.start, p.end) for p in competition.phases),
        )

    @classmethod
    def from_api(cls, doc: Any, source: str) -> ParticipantRules:
        """From the JSON of ``GET /api/v1/competition`` (ClientError naming the field if it does not fit)."""
        try:
            return cls(
                source=f"the server's competition {source}",
                name=_text(doc, "name"),
                benchmark=_text(doc, "benchmark"),
                tasks=None if doc.get("tasks") is None else tuple(_texts(doc, "tasks")),
                kinds=tuple(_texts(doc, "kinds")),
                require_training_labels=_flag(doc, "require_training_labels"),
                upload_max_bytes=_count(doc, "upload_max_bytes"),
                limits=_limits(doc.get("limits")),
                start=_moment(doc, "start"),
                end=None if doc.get("end") is None else _moment(doc, "end"),
                sample_track=doc.get("sample_split", "") is not None,
                phases=_phases(doc.get("phases") or []),
            )
        except (ClientError, ValueError, TypeError, AttributeError) as error:  # ValueError: a date-time that does not parse
            raise ClientError(f"{source}: not a competition this grader can read: {error}") from None


def _phases(docs: Any) -> tuple[PhaseRules, ...]:
    if not isinstance(docs, list):
        raise ClientError("phases: not a list")
    return tuple(PhaseRules(_text(doc, "name"), _moment(doc, "start"), None if doc.get("end") is None else _moment(doc, "end")) for doc in docs)


def _text(doc: Any, key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ClientError(f"{key}: not a string")
    return value


def _texts(doc: Any, key: str) -> list[str]:
    value = doc.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ClientError(f"{key}: not a list of strings")
    return value


def _flag(doc: Any, key: str) -> bool:
    value = doc.get(key)
    if not isinstance(value, bool):
        raise ClientError(f"{key}: not true or false")
    return value


def _count(doc: Any, key: str) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ClientError(f"{key}: not a count")
    return value


def _moment(doc: Any, key: str) -> datetime:
    moment = datetime.fromisoformat(_text(doc, key))
    if moment.tzinfo is None:
        raise ClientError(f"{key}: no UTC offset")
    return moment


def _limits(doc: Any) -> SandboxLimits:
    if not isinstance(doc, dict):
        raise ClientError("limits: not an object")
    values: dict[str, Any] = {}
    for key, value in doc.items():
        if key not in _LIMIT_FIELDS:
            continue  # a newer server's limit this grader does not know
        if key == "runtime":
            if value is not None and not isinstance(value, str):
                raise ClientError("limits.runtime: not a string")
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ClientError(f"limits.{key}: not a positive number")
        values[key] = value
    return SandboxLimits(**values)


def competition_url(target: str) -> str:
    """``target`` (a server's base URL or its competition URL) as the competition URL."""
    base = target.rstrip("/")
    return base if base.endswith(COMPETITION_PATH) else base + COMPETITION_PATH


def is_url(target: str) -> bool:
    """Whether ``--competition`` names a server rather than a file."""
    return target.startswith(("http://", "https://"))


def load_rules(target: str) -> ParticipantRules:
    """The rules of ``target``: a server URL (its ``/api/v1/competition``, read under the bounds of
    :mod:`grader.hosting.participant.fetch` and at most :data:`MAX_ANSWER_BYTES`) or a competition file."""
    if not is_url(target):
        return ParticipantRules.from_competition(load_competition(Path(target)))
    import httpx

    from grader.hosting.participant.fetch import Fetcher, json_answer

    url = competition_url(target)
    try:
        answer = Fetcher(ClientError).fetch("GET", url, max_bytes=MAX_ANSWER_BYTES)
    except httpx.HTTPError as error:
        raise ClientError(f"cannot reach {url}: {type(error).__name__}: {error}") from None
    if answer.status_code != 200:
        raise ClientError(f"{url} answered {answer.status_code}")
    doc = json_answer(answer, ClientError)
    if not isinstance(doc, dict):
        raise ClientError(f"{url}: not a competition object")
    return ParticipantRules.from_api(doc, url)
