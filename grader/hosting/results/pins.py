"""Pins: the benchmark data digests and the grader version every grade of a competition uses.

Pinned at the first start; a later start on other data or another grader
version is refused until the host re-pins (``grader admin repin``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from grader import __version__
from grader.data.registry import resolve_benchmark
from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import Pin
from grader.hosting.errors import PinMismatch


def grading_splits(competition: Competition) -> tuple[Any, list[str], str, str | None]:
    """The benchmark, its tasks, the hidden split and the sample split of ``competition`` (None: no sample track).

    The competition's ``sample_split`` when it names one (every task must have it: the pin's digests then say
    which does not); else the benchmark's (``dev`` unless its ``benchmark.json`` says otherwise) when every task
    has it; else none, and ``--sample`` runs are off: a folder benchmark of ``test`` judgements alone is served.
    """
    benchmark = resolve_benchmark(competition.benchmark_target())
    tasks = benchmark.select(list(competition.tasks) if competition.tasks else None)
    split = competition.split or benchmark.spec.default_split
    sample = competition.sample_split
    if sample is None and all(benchmark.spec.sample_split in benchmark.task(name).splits() for name in tasks):
        sample = benchmark.spec.sample_split
    return benchmark, tasks, split, sample


def served_splits(split: str, sample: str | None) -> tuple[str, ...]:
    """The splits a competition grades on: the hidden one, and the sample one when it has one (once if they are the same)."""
    return tuple(dict.fromkeys(name for name in (split, sample) if name is not None))


def current_digests(competition: Competition) -> dict[str, Any]:
    """Digests of every task's hidden and sample split (when there is one) as the data is now."""
    benchmark, tasks, split, sample = grading_splits(competition)
    digests: dict[str, Any] = {"benchmark": benchmark.name, "version": benchmark.spec.version, "split": split, "sample_split": sample, "tasks": {}}
    for name in tasks:
        task = benchmark.task(name)
        digests["tasks"][name] = {each: task.split_digest(each) for each in served_splits(split, sample)}
    return digests


def active_pin(session: Session, competition: Competition) -> Pin | None:
    """The competition's active pin, if any."""
    return session.scalar(select(Pin).where(Pin.competition == competition.name, Pin.active.is_(True)))


def _differences(old: Pin, digests: dict[str, Any]) -> list[str]:
    changes = []
    if old.grader_version != __version__:
        changes.append(f"grader version {old.grader_version} -> {__version__}")
    if old.digests != digests:
        before, after = old.digests.get("tasks", {}), digests.get("tasks", {})
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                changes.append(f"task {name} data")
        for key in ("benchmark", "version", "split", "sample_split"):
            if old.digests.get(key) != digests.get(key):
                changes.append(f"{key} {old.digests.get(key)!r} -> {digests.get(key)!r}")
    return changes


def ensure_pin(session: Session, competition: Competition) -> Pin:
    """Pin at the first start; afterwards refuse (:class:`PinMismatch`) if data or grader version changed."""
    digests = current_digests(competition)
    pin = active_pin(session, competition)
    if pin is None:
        pin = Pin(competition=competition.name, grader_version=__version__, digests=digests, active=True, pinned_at=utcnow())
        session.add(pin)
        session.flush()
        return pin
    changes = _differences(pin, digests)
    if changes:
        raise PinMismatch(
            f"competition {competition.name!r} was pinned on other data or grader: {'; '.join(changes)}",
            hint="if this is intended, run `grader admin repin` (new grades then use the new pin; old results keep theirs)",
        )
    return pin


def repin(session: Session, competition: Competition) -> Pin:
    """Make the data and grader as they are now the active pin (earlier pins stay, inactive)."""
    session.execute(update(Pin).where(Pin.competition == competition.name).values(active=False))
    pin = Pin(competition=competition.name, grader_version=__version__, digests=current_digests(competition), active=True, pinned_at=utcnow())
    session.add(pin)
    session.flush()
    return pin
