"""The submission state machine, written once, as data.

:data:`TRANSITIONS` is every legal ``(from, to)`` move; each :class:`Event` is
a named subset of it (the moves one kind of happening may make). The lifecycle
service (:mod:`grader.hosting.queue.lifecycle`) has one function per event
and moves a submission only through its single ``move()``, which refuses a
pair outside this table. The database stores the state and the track as these
enums, with a CHECK constraint on their values; the diagram in docs/hosting.md
is rendered from this table (:func:`render_diagram`) and a test keeps the two
equal. A new state or event is added here, and nowhere else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from grader.errors import InternalError


class State(enum.StrEnum):
    """A submission's state. Terminal: scored, failed, error, cancelled."""

    RECEIVED = "received"
    QUEUED = "queued"
    RUNNING = "running"
    #: graded once or more under ``replicas`` > 1 and waiting for another worker of the first replica's fingerprint
    REPLICATING = "replicating"
    SCORED = "scored"
    FAILED = "failed"
    ERROR = "error"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether no event but a rejudge moves a submission out of this state."""
        return self in TERMINAL


class Track(enum.StrEnum):
    """What a submission is graded on: the competition's hidden split (charged) or the public sample split (logs visible)."""

    HIDDEN = "hidden"
    SAMPLE = "sample"


TERMINAL = frozenset({State.SCORED, State.FAILED, State.ERROR, State.CANCELLED})
IN_FLIGHT = frozenset({State.RECEIVED, State.QUEUED, State.RUNNING, State.REPLICATING})

#: Every legal move, ``from -> {to, ...}``. A state absent as a key has no way out (there is none: a rejudge re-opens every terminal state).
TRANSITIONS: Mapping[State, frozenset[State]] = MappingProxyType(
    {
        State.RECEIVED: frozenset({State.QUEUED, State.CANCELLED}),
        State.QUEUED: frozenset({State.RUNNING, State.CANCELLED}),
        State.RUNNING: frozenset({State.QUEUED, State.REPLICATING, State.SCORED, State.FAILED, State.ERROR, State.CANCELLED}),
        State.REPLICATING: frozenset({State.RUNNING, State.CANCELLED}),
        State.SCORED: frozenset({State.QUEUED}),
        State.FAILED: frozenset({State.QUEUED}),
        State.ERROR: frozenset({State.QUEUED}),
        State.CANCELLED: frozenset({State.QUEUED}),
    }
)


def allowed(source: State, target: State) -> bool:
    """Whether ``source -> target`` is in :data:`TRANSITIONS`."""
    return target in TRANSITIONS.get(source, frozenset())


def require(source: State, target: State) -> None:
    """Raise :class:`~grader.errors.InternalError` unless ``source -> target`` is in :data:`TRANSITIONS` (a bug of ours)."""
    if not allowed(source, target):
        raise InternalError(f"submission state {source} -> {target} is not a transition of the state table (grader/hosting/states.py)")


@dataclass(frozen=True)
class Event:
    """A kind of happening and the moves it may make: from any of ``sources`` to one of ``targets``."""

    name: str
    sources: frozenset[State]
    targets: frozenset[State]
    #: one line for the diagram and the docs
    meaning: str

    def applies(self, state: State) -> bool:
        """Whether a submission in ``state`` can be moved by this event (otherwise another writer got there first)."""
        return state in self.sources

    def edges(self) -> frozenset[tuple[State, State]]:
        """The ``(from, to)`` pairs this event may make."""
        return frozenset((s, t) for s in self.sources for t in self.targets if allowed(s, t))


ENQUEUE = Event("enqueue", frozenset({State.RECEIVED}), frozenset({State.QUEUED}), "an upload is stored (or the reaper finds it left received)")
CLAIM = Event(
    "claim",
    frozenset({State.QUEUED, State.REPLICATING}),
    frozenset({State.RUNNING}),
    "a worker takes the job (a lease); a replicating job only a worker of its replicas' fingerprint that graded none of them",
)
REQUEUE_OR_ERROR = Event(
    "requeue-or-error",
    frozenset({State.RUNNING}),
    frozenset({State.QUEUED, State.ERROR}),
    "a platform failure or a lost lease: back to the queue, or error/INFRA at the attempt limit",
)
REPLICATE = Event(
    "replicate",
    frozenset({State.RUNNING}),
    frozenset({State.REPLICATING}),
    "replicas > 1: a replica's runs are recorded without a decision, or a later replica's attempt is lost; another worker grades it",
)
FINISH = Event("finish", frozenset({State.RUNNING}), frozenset({State.SCORED, State.FAILED}), "the lease holder's result is accepted")
CANCEL = Event("cancel", IN_FLIGHT, frozenset({State.CANCELLED}), "the host cancels (never charged)")
REJUDGE = Event("rejudge", TERMINAL, frozenset({State.QUEUED}), "the host grades a finished submission again")

#: Every event, in the order a submission meets them.
EVENTS: tuple[Event, ...] = (ENQUEUE, CLAIM, REQUEUE_OR_ERROR, REPLICATE, FINISH, CANCEL, REJUDGE)


def event_of(source: State, target: State) -> Event:
    """The one event that makes the move ``source -> target`` (InternalError for a pair outside the table)."""
    require(source, target)
    makers = [event for event in EVENTS if (source, target) in event.edges()]
    if len(makers) != 1:
        raise InternalError(f"{len(makers)} events make the move {source} -> {target}; the table wants exactly one")
    return makers[0]


class ShardState(enum.StrEnum):
    """A shard job's state: a sharded ONNX grade's query job or shard, a row of its submission's running attempt."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


#: Every legal move of a shard job. ``running -> queued``: a lost lease or an INFRA failure (the job is re-run alone);
#: ``running -> failed``: a participant's fault (the task fails with its code) or the try limit; ``queued | running -> failed``:
#: the attempt's deadline passed (``INFRA``); ``-> skipped``: another job of its task failed, so its work would be thrown away
#: (queued ones at once, running ones when their lease is next renewed or reaped); ``done -> queued``: the task's query
#: vectors turned out suspect (a shard worker could not reproduce their misfit), so the query job and the shards done
#: with them run again (:func:`grader.hosting.queue.shard_jobs.requeue_suspect`). Failed and skipped are final: a
#: re-queued or rejudged submission plans new shard jobs for its new attempt.
SHARD_TRANSITIONS: Mapping[ShardState, frozenset[ShardState]] = MappingProxyType(
    {
        ShardState.QUEUED: frozenset({ShardState.RUNNING, ShardState.FAILED, ShardState.SKIPPED}),
        ShardState.RUNNING: frozenset({ShardState.QUEUED, ShardState.DONE, ShardState.FAILED, ShardState.SKIPPED}),
        ShardState.DONE: frozenset({ShardState.QUEUED}),
        ShardState.FAILED: frozenset(),
        ShardState.SKIPPED: frozenset(),
    }
)


def require_shard(source: ShardState, target: ShardState) -> None:
    """Raise :class:`~grader.errors.InternalError` unless ``source -> target`` is in :data:`SHARD_TRANSITIONS` (a bug of ours)."""
    if target not in SHARD_TRANSITIONS.get(source, frozenset()):
        raise InternalError(f"shard job state {source} -> {target} is not a transition of the shard table (grader/hosting/states.py)")


def render_diagram() -> str:
    """The state table as the Markdown block docs/hosting.md carries (a test compares them)."""
    lines = ["```text"]
    width = max(len(state.value) for state in State)
    for source in State:
        for target in sorted(TRANSITIONS.get(source, frozenset()), key=list(State).index):
            lines.append(f"{source.value:>{width}} -> {target.value:<{width}}  {event_of(source, target).name}")
    lines.append("```")
    lines.append("")
    lines.append("| event | moves | when |")
    lines.append("|---|---|---|")
    for event in EVENTS:
        sources = " \\| ".join(s.value for s in State if s in event.sources)
        targets = " \\| ".join(t.value for t in State if t in event.targets)
        lines.append(f"| `{event.name}` | {sources} → {targets} | {event.meaning} |")
    lines.append("")
    lines.append("Shard jobs of a sharded ONNX grade (each a row of the running attempt, with its own lease and tries):")
    lines.append("")
    lines.append("```text")
    for shard_source in ShardState:
        for shard_target in sorted(SHARD_TRANSITIONS[shard_source], key=list(ShardState).index):
            lines.append(f"{shard_source.value:>{width}} -> {shard_target.value}")
    lines.append("```")
    return "\n".join(lines) + "\n"


#: The lines around the generated diagram in docs/hosting.md.
DIAGRAM_BEGIN = "<!-- state table: generated from grader/hosting/states.py by scripts/render_states.py; do not edit -->"
DIAGRAM_END = "<!-- end of the generated state table -->"


def with_diagram(document: str) -> str:
    """``document`` with the block between :data:`DIAGRAM_BEGIN` and :data:`DIAGRAM_END` replaced by :func:`render_diagram`."""
    head, found, rest = document.partition(DIAGRAM_BEGIN + "\n")
    _old, found_end, tail = rest.partition(DIAGRAM_END)
    if not found or not found_end:
        raise InternalError("the document has no generated state-table block")
    return f"{head}{DIAGRAM_BEGIN}\n{render_diagram()}\n{DIAGRAM_END}{tail}"
