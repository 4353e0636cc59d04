"""The competition file: TOML, validated against ``grader/schemas/competition.schema.json``.

Every error names the key (``quotas.per_day: ...``) and the file, so a host can
fix it without reading the schema.
"""

from __future__ import annotations

import ipaddress
import itertools
import tomllib
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

import jsonschema

from grader.errors import UsageError
from grader.hosting.errors import CompetitionFileError
from grader.sandbox.limits import SandboxLimits, parse_size
from grader.schemas import load_schema

DEFAULT_UPLOAD_BYTES = 512 << 20
DEFAULT_UNPACKED_BYTES = 4 << 30
#: The depth of every hosted ranking (the report's ``ranking.top_k``): the compact runs workers return hold at most this many hits a query.
#: Here, not in grading_adapter, so that the server's scoring and admin commands read it without loading the ranking code.
DEPTH = 1000


def _schema() -> dict[str, Any]:
    return load_schema("competition")


@dataclass(frozen=True)
class Quotas:
    """Per participant: hidden-split submissions per rolling 24 h, in total and at once; sample runs per 24 h."""

    per_day: int = 5
    total: int = 100
    concurrent: int = 2
    sample_per_day: int = 20
    #: Bytes of uploads stored per participant (every stored upload counts, whatever its state: uploads are kept)
    stored_bytes: int = 8 << 30
    #: Refused uploads (422: invalid) per rolling hour before further uploads are refused 429 unread
    refusals_per_hour: int = 10
    #: Uncharged platform failures (``error``) per rolling hour a participant's submissions may end in
    #: before each further one counts as a refusal too (a participant must not grade for free without bound)
    infra_per_hour: int = 3
    #: CPU-minutes of grading per participant per rolling 24 h, both tracks (0: no CPU quota). Admission counts the
    #: minutes already spent: each accepted grade's ``cost.total.cpu_s``, the grading worker's word (retries and
    #: replicas never charged: only the accepted result's own grade counts)
    cpu_minutes_per_day: float = 0.0


#: The least ``upload.stall_s``: an arriving copy refreshes its mark once a second, so a shorter window would
#: let a retry take over a copy that is still sending.
MIN_STALL_S = 2.0


@dataclass(frozen=True)
class UploadLimits:
    """What an upload may unpack to (a ratio to its compressed size and an absolute cap), how long its
    reservation lives without progress (a server killed mid-upload frees the participant's slot after that),
    and how long a copy may go without progress before a retry under its key may take it over."""

    max_unpack_ratio: float = 20.0
    max_unpacked_bytes: int = DEFAULT_UNPACKED_BYTES
    reservation_s: float = 120.0
    #: A copy whose bytes (or whose check) showed progress within this many seconds is "arriving": another copy
    #: under its key is answered 409 "in progress", unread. 10 s: a healthy stream refreshes its mark every
    #: second, and a lost segment's first three TCP retransmissions (1, 2 and 4 s apart) fit within it, so a
    #: stream that merely hiccups is not taken over; yet a retry whose first copy died unseen waits only this
    #: long (the client waits up to 60 s).
    stall_s: float = 10.0


#: The longest wait between two tries of a platform failure: the backoff doubles up to it.
INFRA_BACKOFF_CAP_S = 60.0


@dataclass(frozen=True)
class QueueTiming:
    """Lease length, heartbeat period, how long a job may wait unclaimed before it is re-dispatched, reaper period;
    and how platform failures are retried (docs/hosting.md, "Platform failures"): the first wait after one, and how
    long a grade's platform failures are retried before it ends ``error``."""

    lease_s: float = 60.0
    heartbeat_s: float = 10.0
    redispatch_s: float = 30.0
    reap_every_s: float = 2.0
    #: The wait after a platform failure before the job (or the attempt) may be claimed again; it doubles with each
    #: further failure, up to :data:`INFRA_BACKOFF_CAP_S` (or this, when larger).
    infra_backoff_s: float = 5.0
    #: How long, from its first, the platform failures of one shard job or of one submission's grade are retried
    #: (beyond ``max_attempts`` tries): an engine restarted within it leaves the grade to complete, uncharged.
    infra_retry_s: float = 600.0

    def backoff_s(self, failures: int) -> float:
        """The wait after the ``failures``-th platform failure (1, 2, ...): ``infra_backoff_s`` doubling, capped."""
        cap = max(INFRA_BACKOFF_CAP_S, self.infra_backoff_s)
        return float(min(cap, self.infra_backoff_s * 2 ** min(max(failures, 1) - 1, 16)))


@dataclass(frozen=True)
class ShardSizes:
    """Shards of an ONNX submission's corpus: documents per shard (rounded up to whole chunks; None: one shard),
    the bound of a shard's search blocks (``grader.retrieval.shard_run``; docs/search.md), and the deadline of a
    sharded attempt: ``deadline_s`` after its jobs are planned, those still queued or running fail their tasks ``INFRA``
    and the coordinator stops waiting (docs/scale.md, "Shards as jobs")."""

    shard_documents: int | None = None
    search_memory: int = 256 << 20
    #: A day: the whole CoIR grade of a base-size model on a few one-CPU workers fits (docs/scale.md); it is the
    #: backstop of a task no live worker can finish (its query vectors done on a worker of a fingerprint now gone).
    deadline_s: float = 86_400.0
    #: With ``replicas`` > 1, the workers that compute one replica of a sharded grade (its coordinator included): each
    #: replica's jobs go only to workers that compute nothing of another replica of the submission, so a decided grade
    #: needs up to 2 x replicas - 1 disjoint groups of this many. 1 (the default): a replica's coordinator computes all
    #: its jobs, and any 2 x replicas - 1 workers of a fingerprint decide any grade, as without shards (docs/hosting.md).
    replica_workers: int = 1

    def replica_cap(self, replicas: int) -> int | None:
        """The workers one replica's jobs may go to under ``replicas`` (None: not replicated, any worker)."""
        return self.replica_workers if replicas > 1 else None


#: Retention policies of the workers' compact runs (``[retention] runs``).
RETAIN_ALL = "all"
RETAIN_FINALS_AND_BEST = "finals-and-best"


@dataclass(frozen=True)
class RetentionPolicy:
    """What the server keeps of the workers' compact runs (``state/runs/``; docs/hosting.md#retention).

    ``all``: every run, for ever. ``finals-and-best``: every run until the end; after it, only the
    runs of each participant's finals and of their best entry on each board (what a re-scoring of
    the boards needs); the server removes the rest (:mod:`grader.hosting.services.retention`).
    """

    runs: str = RETAIN_ALL


@dataclass(frozen=True)
class LeaderboardPolicy:
    """The public share of the hidden queries, how many finals a participant picks, and the statistics' resamples and seed."""

    public_fraction: float = 0.3
    finals: int = 2
    resamples: int = 10_000
    seed: int = 0
    #: Ladder mode of the public board (Blum & Hardt 2015); ``ladder_step`` None = parameter-free margin
    ladder: bool = False
    ladder_step: float | None = None


#: ``regrade``: when the phase opens, nothing of the previous phase is graded again (the default) ...
REGRADE_NONE = "none"
#: ... or each participant's best public entry of it is, on this phase's split, not charged ...
REGRADE_BEST = "best"
#: ... or the submissions each participant (or team) chose during it (``grader finals ID`` in that phase), likewise
REGRADE_CHOSEN = "chosen"


@dataclass(frozen=True)
class Phase:
    """One phase of a competition (``[[phases]]``; docs/hosting.md#phases): its own window, kinds, quotas and Ladder.

    A phase's quotas count only its own submissions (those uploaded within its window); its board ranks only them.
    """

    name: str
    start: datetime
    #: None: the last phase, open for good (a standing board after the competition's earlier phases)
    end: datetime | None
    title: str = ""
    #: the split it grades (None: the competition's); the server holds it to the competition's split or its sample split
    split: str | None = None
    kinds: tuple[str, ...] = ("onnx", "docker")
    quotas: Quotas = field(default_factory=Quotas)
    leaderboard: LeaderboardPolicy = field(default_factory=LeaderboardPolicy)
    #: what of the previous phase it grades again when it opens (:mod:`grader.hosting.services.phase_regrade`)
    regrade: str = REGRADE_NONE
    #: whether its split's judgements are hidden or public (the competition's ``test_data`` unless the phase says)
    test_data: str = "hidden"

    def holds(self, moment: datetime) -> bool:
        """Whether ``moment`` (an upload's completion) falls within this phase's window."""
        return self.start <= moment and (self.end is None or moment < self.end)


def choosing_phase(phases: tuple[Phase, ...], moment: datetime) -> Phase | None:
    """The phase whose submissions a participant chooses among at ``moment``: the last phase (its choices are the final
    ones), at any time; or the open phase whose next one carries its choices (``regrade = "chosen"``), while it is open.
    None for a competition without phases (its choices: any submission's)."""
    if not phases:
        return None
    for phase, following in itertools.pairwise(phases):
        if following.regrade == REGRADE_CHOSEN and phase.holds(moment):
            return phase
    return phases[-1]


#: ``test_data``: the graded split's judgements are the host's secret (the default) ...
TEST_DATA_HIDDEN = "hidden"
#: ... or published (anyone scores a run locally), so a board over them is checked, not trusted
TEST_DATA_PUBLIC = "public"


@dataclass(frozen=True)
class NotifyPolicy:
    """Participants' notifications (``[notify]``; docs/hosting.md, "Notifications"): which special networks a webhook
    may reach, names resolved without DNS, how often and how long a delivery is tried, and the SMTP relay of e-mail."""

    #: CIDR ranges a webhook may reach although special (loopback, private, link-local...): none by default.
    allow_networks: tuple[str, ...] = ()
    #: Names resolved to a fixed address instead of by DNS (the address is checked like any other).
    resolve: tuple[tuple[str, str], ...] = ()
    attempts: int = 6
    max_age_s: float = 3600.0
    backoff_s: float = 2.0
    timeout_s: float = 5.0
    smtp_host: str | None = None
    smtp_port: int = 25
    smtp_from: str = ""
    smtp_starttls: bool = False

    def backoff(self, tries: int) -> float:
        """The wait after the ``tries``-th failed try (1, 2, ...): ``backoff_s`` doubling, at most 10 minutes."""
        return float(min(600.0, self.backoff_s * 2 ** min(max(tries, 1) - 1, 16)))


@dataclass(frozen=True)
class TeamPolicy:
    """Teams (``[teams]``; docs/hosting.md, "Teams"): how many members a team holds, until when membership may change,
    and how long an invitation code stays valid. A competition without ``[teams]`` has no teams."""

    max_size: int = 4
    #: After it, no team is created, joined or left (None: the competition's end).
    merge_deadline: datetime | None = None
    invite_ttl_s: float = 86400.0


@dataclass(frozen=True)
class Competition:
    """A validated competition file."""

    name: str
    benchmark: str
    start: datetime
    #: None: no end, a standing leaderboard (docs/hosting.md#standing-leaderboards): the reaper never ends or reveals it
    end: datetime | None
    path: Path
    title: str = ""
    split: str | None = None
    sample_split: str | None = None
    tasks: tuple[str, ...] | None = None
    kinds: tuple[str, ...] = ("onnx", "docker")
    require_training_labels: bool = False
    max_attempts: int = 3
    #: How many workers of equal fingerprint must return identical runs before an ONNX grade is accepted (docs/hosting.md, "Replicas").
    replicas: int = 1
    #: Who may sign up on the web: ``open``, ``approval`` or ``closed`` (docs/hosting.md, "Sign-up").
    registration: str = "closed"
    #: The rules text a person accepts at sign-up (None: none; sign-up needs one).
    rules: str | None = None
    quotas: Quotas = field(default_factory=Quotas)
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    upload_max_bytes: int = DEFAULT_UPLOAD_BYTES
    unpack: UploadLimits = field(default_factory=UploadLimits)
    queue: QueueTiming = field(default_factory=QueueTiming)
    leaderboard: LeaderboardPolicy = field(default_factory=LeaderboardPolicy)
    sharding: ShardSizes = field(default_factory=ShardSizes)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    notify: NotifyPolicy = field(default_factory=NotifyPolicy)
    #: Whether the graded split's judgements are public (anyone can score it locally: CoIR's test data) or hidden.
    test_data: str = TEST_DATA_HIDDEN
    #: The phases, in order (``[[phases]]``); empty for a file without them: one window, ``start`` to ``end``.
    phases: tuple[Phase, ...] = ()

    def phase_at(self, moment: datetime) -> Phase | None:
        """The phase open at ``moment`` (None: before the first, between two, after the last, or a file without phases)."""
        return next((phase for phase in self.phases if phase.holds(moment)), None)

    def phase_named(self, name: str) -> Phase | None:
        """The phase called ``name``, if the file has one."""
        return next((phase for phase in self.phases if phase.name == name), None)

    def board_phase(self, moment: datetime) -> Phase | None:
        """The phase whose board a reader gets unless they name one: the open phase, else the last one that opened (its
        board final), else the first (None for a file without phases)."""
        if not self.phases:
            return None
        started = [phase for phase in self.phases if phase.start <= moment]
        return self.phase_at(moment) or (started[-1] if started else self.phases[0])

    def rules_at(self, moment: datetime) -> Competition:
        """The competition as the phase open at ``moment`` runs it (a submission's rules: those of its upload's phase)."""
        return self.in_phase(self.phase_at(moment))

    def in_phase(self, phase: Phase | None) -> Competition:
        """The competition as ``phase`` runs it: its kinds, quotas and board settings in place of the file's (itself for None)."""
        if phase is None:
            return self
        return replace(self, kinds=phase.kinds, quotas=phase.quotas, leaderboard=phase.leaderboard, test_data=phase.test_data)

    @property
    def standing(self) -> bool:
        """A standing leaderboard: the file names no end, so nothing ever ends, closes or reveals it by itself."""
        return self.end is None

    @property
    def public_data(self) -> bool:
        """Whether the graded split's judgements are public: then nothing of a grade is secret, from the start."""
        return self.test_data == TEST_DATA_PUBLIC

    #: None: the file has no ``[teams]``, and the competition no teams.
    teams: TeamPolicy | None = None

    def merge_deadline(self) -> datetime | None:
        """When team membership locks: ``teams.merge_deadline``, else the end in the file (None: a standing board's)."""
        return self.end if self.teams is None or self.teams.merge_deadline is None else self.teams.merge_deadline

    def benchmark_target(self) -> str:
        """The benchmark as ``resolve_benchmark`` takes it: a registered name, or a folder relative to the file.

        A bare name is a folder next to the file when one is there (with or without ``benchmark.json``:
        task folders alone make a benchmark), unless it is a registered name and the folder has no
        ``benchmark.json``; never a folder in the working directory, which depends on where a command runs.
        """
        from grader.data.registry import REGISTERED

        candidate = self.path.parent / self.benchmark
        described = (candidate / "benchmark.json").exists()
        if "/" in self.benchmark or self.benchmark.startswith(".") or (candidate.is_dir() and (described or self.benchmark not in REGISTERED)):
            return str(candidate.resolve())
        return self.benchmark


def _jsonable(value: Any) -> Any:
    """TOML date-times become RFC 3339 strings so the JSON Schema can see them."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _key(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = str(error.message).split("'")[1] if "'" in error.message else ""
        parts.append(missing)
    elif error.validator == "additionalProperties":
        extra = str(error.message).split("'")[1] if "'" in error.message else ""
        parts.append(extra)
    return ".".join(p for p in parts if p) or "(top level)"


def _utc(text: str, key: str, path: Path) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CompetitionFileError(f"not an RFC 3339 date-time: {text!r}", path=path, field=key) from None
    if moment.tzinfo is None:
        raise CompetitionFileError(f"{text!r} has no UTC offset; write e.g. 2027-01-31T23:59:59Z", path=path, field=key)
    return moment.astimezone(UTC)


def parse_competition(data: dict[str, Any], path: Path) -> Competition:
    """Validate the parsed TOML ``data`` and build a :class:`Competition`."""
    doc = _jsonable(data)
    validator = jsonschema.Draft202012Validator(_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    if errors:
        first = errors[0]
        what = first.message if first.validator not in ("additionalProperties",) else "unknown key"
        if first.validator == "required":
            what = "required key is missing"
        raise CompetitionFileError(
            what, path=path, field=_key(first), hint="see grader/schemas/competition.schema.json and competitions_example/mini.toml"
        )
    test_data = str(doc.get("test_data", TEST_DATA_HIDDEN))
    start, end = _window(doc, path)
    leaderboard = _leaderboard(doc.get("leaderboard", {}), test_data=test_data, standing=end is None, path=path)
    quota_doc = dict(doc.get("quotas", {}))
    if "stored_bytes" in quota_doc:
        try:
            quota_doc["stored_bytes"] = parse_size(quota_doc["stored_bytes"])
        except UsageError as error:
            raise CompetitionFileError(str(error), path=path, field="quotas.stored_bytes") from None
    if "cpu_minutes_per_day" in quota_doc:
        quota_doc["cpu_minutes_per_day"] = float(quota_doc["cpu_minutes_per_day"])
    quotas = Quotas(**quota_doc)
    kinds = tuple(doc.get("kinds", ("onnx", "docker")))
    phases = _phases(doc, kinds=kinds, quotas=quotas, leaderboard=leaderboard, test_data=test_data, path=path)
    limits_doc = dict(doc.get("limits", {}))
    values: dict[str, Any] = {}
    if "time_limit_s" in limits_doc:
        values["time_limit_s"] = float(limits_doc["time_limit_s"])
    if "cpus" in limits_doc:
        values["cpus"] = float(limits_doc["cpus"])
    if "runtime" in limits_doc:
        values["runtime"] = limits_doc["runtime"]
    try:
        if "memory" in limits_doc:
            values["memory_bytes"] = parse_size(limits_doc["memory"])
        if "output" in limits_doc:  # per sandboxed run: a task, or one shard of it
            values["output_bytes"] = parse_size(limits_doc["output"])
        sharding_doc = doc.get("sharding", {})
        sharding = ShardSizes(
            shard_documents=sharding_doc.get("shard_documents"),
            search_memory=parse_size(sharding_doc["search_memory"]) if "search_memory" in sharding_doc else ShardSizes.search_memory,
            deadline_s=float(sharding_doc.get("deadline_s", ShardSizes.deadline_s)),
            replica_workers=int(sharding_doc.get("replica_workers", ShardSizes.replica_workers)),
        )
        upload_doc = doc.get("upload", {})
        upload_bytes = parse_size(upload_doc["max_bytes"]) if "max_bytes" in upload_doc else DEFAULT_UPLOAD_BYTES
        unpacked_bytes = parse_size(upload_doc["max_unpacked_bytes"]) if "max_unpacked_bytes" in upload_doc else DEFAULT_UNPACKED_BYTES
    except UsageError as error:
        raise CompetitionFileError(
            str(error), path=path, field="limits.memory / limits.output / sharding.search_memory / upload.max_bytes / upload.max_unpacked_bytes"
        ) from None
    unpack = UploadLimits(
        max_unpack_ratio=float(upload_doc.get("max_unpack_ratio", UploadLimits.max_unpack_ratio)),
        max_unpacked_bytes=unpacked_bytes,
        reservation_s=float(upload_doc.get("reservation_s", UploadLimits.reservation_s)),
        stall_s=float(upload_doc.get("stall_s", UploadLimits.stall_s)),
    )
    if not MIN_STALL_S <= unpack.stall_s < unpack.reservation_s:
        raise CompetitionFileError(
            f"must be at least {MIN_STALL_S:g} s (the mark is refreshed once a second) and shorter than upload.reservation_s",
            path=path,
            field="upload.stall_s",
        )
    if doc.get("registration", "closed") != "closed" and "rules" not in doc:
        # A person accepts the rules at sign-up and the log records which text: sign-up without one is a host's slip.
        raise CompetitionFileError('sign-up needs the rules text a person accepts (rules = "...")', path=path, field="registration")
    queue = QueueTiming(**{k: float(v) for k, v in doc.get("queue", {}).items()})
    if queue.heartbeat_s >= queue.lease_s:
        raise CompetitionFileError(
            "must be shorter than queue.lease_s (a worker renews its lease by heartbeat)", path=path, field="queue.heartbeat_s"
        )
    return Competition(
        name=doc["name"],
        title=doc.get("title", ""),
        benchmark=doc["benchmark"],
        split=doc.get("split"),
        sample_split=doc.get("sample_split"),
        tasks=tuple(doc["tasks"]) if "tasks" in doc else None,
        start=start,
        end=end,
        path=path.resolve(),
        kinds=kinds,
        require_training_labels=bool(doc.get("require_training_labels", False)),
        max_attempts=int(doc.get("max_attempts", 3)),
        replicas=int(doc.get("replicas", 1)),
        registration=str(doc.get("registration", "closed")),
        rules=doc.get("rules"),
        quotas=quotas,
        limits=SandboxLimits(**values),
        upload_max_bytes=upload_bytes,
        unpack=unpack,
        queue=queue,
        leaderboard=leaderboard,
        sharding=sharding,
        retention=RetentionPolicy(**doc.get("retention", {})),
        notify=_notify_policy(doc.get("notify", {}), path),
        test_data=test_data,
        phases=phases,
        teams=_team_policy(doc["teams"], start, end, path) if "teams" in doc else None,
    )


def _team_policy(doc: dict[str, Any], start: datetime, end: datetime | None, path: Path) -> TeamPolicy:
    """``[teams]``: a merge deadline inside the competition (one after the end would never lock membership; a standing
    board, without an end, may set one or none)."""
    deadline = _utc(doc["merge_deadline"], "teams.merge_deadline", path) if "merge_deadline" in doc else None
    if deadline is not None and not (start < deadline and (end is None or deadline <= end)):
        raise CompetitionFileError("must be after start and no later than end", path=path, field="teams.merge_deadline")
    return TeamPolicy(
        max_size=int(doc.get("max_size", TeamPolicy.max_size)),
        merge_deadline=deadline,
        invite_ttl_s=float(doc.get("invite_ttl_s", TeamPolicy.invite_ttl_s)),
    )


def _notify_policy(doc: dict[str, Any], path: Path) -> NotifyPolicy:
    """``[notify]``: every network and address parsed now, so that a typo stops the server at start, not a delivery later."""
    for key, values in (("allow_networks", doc.get("allow_networks", [])), ("resolve", list(doc.get("resolve", {}).values()))):
        for value in values:
            try:
                ipaddress.ip_network(value, strict=False) if key == "allow_networks" else ipaddress.ip_address(value)
            except ValueError:
                raise CompetitionFileError(
                    f"not an IP {'network' if key == 'allow_networks' else 'address'}: {value!r}", path=path, field=f"notify.{key}"
                ) from None
    return NotifyPolicy(
        allow_networks=tuple(doc.get("allow_networks", ())),
        resolve=tuple(sorted((name.lower(), address) for name, address in doc.get("resolve", {}).items())),
        attempts=int(doc.get("attempts", NotifyPolicy.attempts)),
        max_age_s=float(doc.get("max_age_s", NotifyPolicy.max_age_s)),
        backoff_s=float(doc.get("backoff_s", NotifyPolicy.backoff_s)),
        timeout_s=float(doc.get("timeout_s", NotifyPolicy.timeout_s)),
        smtp_host=doc.get("smtp_host"),
        smtp_port=int(doc.get("smtp_port", NotifyPolicy.smtp_port)),
        smtp_from=doc.get("smtp_from", ""),
        smtp_starttls=bool(doc.get("smtp_starttls", False)),
    )


def _window(doc: dict[str, Any], path: Path) -> tuple[datetime, datetime | None]:
    """The competition's window: the file's ``start`` and ``end``, or with ``[[phases]]`` the first phase's start and the
    last one's end (then the file names no window of its own: one place for each date)."""
    if "phases" in doc:
        for key in ("start", "end"):
            if key in doc:
                raise CompetitionFileError(f"the phases name the windows: give it as phases.N.{key} instead", path=path, field=key)
        first, last = doc["phases"][0], doc["phases"][-1]
        return _utc(first["start"], "phases.0.start", path), (
            _utc(last["end"], f"phases.{len(doc['phases']) - 1}.end", path) if "end" in last else None
        )
    if "start" not in doc:
        raise CompetitionFileError("required key is missing", path=path, field="start")
    start = _utc(doc["start"], "start", path)
    end = _utc(doc["end"], "end", path) if "end" in doc else None
    if end is not None and end <= start:
        raise CompetitionFileError("must be after start", path=path, field="end")
    return start, end


def _regrade(entry: dict[str, Any], index: int, path: Path) -> str:
    """A phase's ``regrade``: the first phase has no previous one to take entries from."""
    regrade = str(entry.get("regrade", REGRADE_NONE))
    if regrade != REGRADE_NONE and index == 0:
        raise CompetitionFileError("the first phase has no previous phase to grade again", path=path, field="phases.0.regrade")
    return regrade


def _phases(
    doc: dict[str, Any], *, kinds: tuple[str, ...], quotas: Quotas, leaderboard: LeaderboardPolicy, test_data: str, path: Path
) -> tuple[Phase, ...]:
    """``[[phases]]``: each phase's window (in order, never overlapping; only the last may have no end) and its own kinds,
    quotas and board settings over the file's (docs/hosting.md#phases)."""
    phases: list[Phase] = []
    names: set[str] = set()
    entries = doc.get("phases", [])
    for index, entry in enumerate(entries):
        where = f"phases.{index}"
        if entry["name"] in names:
            raise CompetitionFileError(f"phase {entry['name']!r} is named twice", path=path, field=f"{where}.name")
        names.add(entry["name"])
        start = _utc(entry["start"], f"{where}.start", path)
        if "end" not in entry and index < len(entries) - 1:
            raise CompetitionFileError("required key is missing: only the last phase may have no end", path=path, field=f"{where}.end")
        end = _utc(entry["end"], f"{where}.end", path) if "end" in entry else None
        if end is not None and end <= start:
            raise CompetitionFileError("must be after the phase's start", path=path, field=f"{where}.end")
        if phases and (previous := phases[-1].end) is not None and start < previous:
            raise CompetitionFileError(
                f"must not be before the end of phase {phases[-1].name!r} ({previous.isoformat()}): phases follow each other",
                path=path,
                field=f"{where}.start",
            )
        phase_data = str(entry.get("test_data", test_data))
        base = dict(vars(leaderboard))
        if "ladder" not in doc.get("leaderboard", {}):  # the file left the Ladder to its default: each phase's own
            base["ladder"] = end is None and phase_data == TEST_DATA_HIDDEN  # a standing phase over hidden data
        board = {**base, **entry.get("leaderboard", {})}
        if phase_data == TEST_DATA_PUBLIC and board.get("ladder"):
            raise CompetitionFileError('must be false with test_data = "public"', path=path, field=f"{where}.leaderboard.ladder")
        phases.append(
            Phase(
                name=entry["name"],
                title=entry.get("title", ""),
                split=entry.get("split"),
                regrade=_regrade(entry, index, path),
                test_data=phase_data,
                start=start,
                end=end,
                kinds=tuple(entry.get("kinds", kinds)),
                quotas=replace(quotas, **entry.get("quotas", {})),
                leaderboard=LeaderboardPolicy(**board),
            )
        )
    return tuple(phases)


def _leaderboard(doc: dict[str, Any], *, test_data: str, standing: bool, path: Path) -> LeaderboardPolicy:
    """The ``[leaderboard]`` table, with the defaults a board's data and end call for (docs/hosting.md#standing-leaderboards).

    Over public test data the Ladder protects nothing (anyone scores any run locally) and would hide the very numbers
    a reader checks, so it is refused. A standing board over hidden data never reveals anything: its hidden
    judgements are probed for ever, so its public board is a Ladder unless the file says otherwise.
    """
    if test_data == TEST_DATA_PUBLIC and doc.get("ladder"):
        raise CompetitionFileError(
            'must be false with test_data = "public": anyone scores public data locally, so the board publishes every number',
            path=path,
            field="leaderboard.ladder",
        )
    values = dict(doc)
    if standing and test_data == TEST_DATA_HIDDEN:
        values.setdefault("ladder", True)
    return LeaderboardPolicy(**values)


def load_competition(path: str | Path) -> Competition:
    """Read and validate a competition file; raise :class:`CompetitionFileError` naming the key on any problem."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as error:
        raise CompetitionFileError(f"cannot read: {error.strerror or error}", path=file) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CompetitionFileError(f"not valid TOML: {error}", path=file) from None
    return parse_competition(data, file)
