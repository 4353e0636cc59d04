"""What a grade cost: the report's ``cost`` block (docs/reports.md, "The cost block").

Per task: wall seconds of encoding (the encoder process or container, model load
included), of the grader's search and of scoring; CPU seconds and peak memory of the
encoder (:mod:`grader.sandbox.usage`); texts and tokens per second; energy (RAPL,
:mod:`grader.grading.energy`). Every figure is a number or ``null`` with the reason in
``missing``. Nothing here feeds a grade: these figures vary between re-grades of one
submission, which is why they live in one block that the determinism and byte-pin tests
and ``grader reproduce`` skip by name.

A task graded by an earlier run and resumed from ``OUT/tasks`` cost nothing in this one:
it is listed with ``"resumed": true`` and no figures.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grader import jsonio
from grader.errors import ReportError
from grader.grading.energy import EnergyReading
from grader.sandbox.usage import ResourceUsage

SCHEME = "grader-cost/v1"
#: Who measured: the grader that signs the report, or a hosted worker (its word, bounded and checked by the server).
SOURCES = ("grader", "worker")


@dataclass(frozen=True)
class RankCost:
    """What ranking one task used, as a task grader measured it (``TaskGrader.last_cost``)."""

    #: wall seconds of the encoder process or container (model load included)
    encoder_s: float
    usage: ResourceUsage
    #: wall seconds of the grader's own search; None where the container searched (retrieve mode) or none ran
    search_s: float | None = None
    #: tokens fed to the model, where the encoder counted them (in-process ONNX)
    tokens: int | None = None


@dataclass
class TaskCost:
    """One task's figures as the grading loop collects them (then :meth:`as_json`)."""

    texts: int
    queries: int
    rank: RankCost | None = None
    score_s: float | None = None
    energy: EnergyReading | None = None
    missing: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The task's entry of the ``cost`` block: every figure a finite number or null, the reasons in ``missing``."""
        missing = dict(self.missing)
        rank = self.rank
        if rank is None:
            reason = missing.pop("rank", "the task failed before its encoder ran")
            usage = ResourceUsage.unmeasured(reason)
            encoder_s = search_s = tokens = None
            missing.update({"encode_s": reason, "search_s": reason})
        else:
            usage, encoder_s, search_s, tokens = rank.usage, rank.encoder_s, rank.search_s, rank.tokens
            if search_s is None:
                missing["search_s"] = "the container searched (retrieve mode), or the task failed before the search"
        missing.update(usage.missing)
        if self.score_s is None:
            missing.setdefault("score_s", "the task was not scored")
        if tokens is None:
            missing.setdefault("tokens", "only the in-process encoder counts tokens")
        energy_j = None
        if self.energy is not None and self.energy.joules is not None:
            energy_j = self.energy.joules
        else:
            missing["energy_j"] = self.energy.reason if self.energy is not None else "not measured"
        entry: dict[str, Any] = {
            "wall_s": {"encode": _seconds(encoder_s), "search": _seconds(search_s), "score": _seconds(self.score_s)},
            "cpu_s": _seconds(usage.cpu_s),
            "peak_memory_bytes": usage.peak_memory_bytes,
            "measured_by": usage.method[:300],
            "texts": self.texts,
            "texts_per_s": _rate(self.texts, encoder_s),
            "tokens": tokens,
            "tokens_per_s": None if tokens is None else _rate(tokens, encoder_s),
            "queries": self.queries,
            "energy_j": energy_j,
            "missing": {key: reason[:300] for key, reason in sorted(missing.items())},
        }
        return entry


def _seconds(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else max(0.0, float(value))


def _rate(count: int, seconds: float | None) -> float | None:
    """``count`` per second, or None when no time was measured (a zero interval says nothing)."""
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    return count / seconds


def resumed_task() -> dict[str, Any]:
    """The entry of a task resumed from an earlier run's stored result: it cost nothing in this run."""
    return {"resumed": True}


def per_thousand_queries(cpu_s: float | None, queries: int) -> float | None:
    """CPU seconds per 1,000 queries (the board's and ``grader compare``'s cost column), or None."""
    if cpu_s is None or queries <= 0:
        return None
    return cpu_s * 1000 / queries


def fingerprint_digest(fingerprint: Mapping[str, Any] | None) -> str | None:
    """The sha256 of a machine fingerprint's canonical JSON (what ``cost.machine.fingerprint`` names), None for none.

    The same digest as the server pairs replicas on (``grader.hosting.services.replication.fingerprint_digest``).
    """
    if not fingerprint:
        return None
    return hashlib.sha256(jsonio.dumps(dict(fingerprint), sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()


def cost_block(tasks: Mapping[str, dict[str, Any]], *, source: str, fingerprint: str | None = None) -> dict[str, Any]:
    """The report's ``cost`` block from each task's entry (:meth:`TaskCost.as_json` or :func:`resumed_task`).

    ``total.cpu_s`` sums the measured tasks; it is null when any graded task's CPU is
    unknown (a partial sum would read as cheaper than it was). Resumed tasks are left
    out of the totals: they were paid for by an earlier run.
    """
    if source not in SOURCES:
        raise ReportError(f"unknown cost source {source!r}")
    measured = [entry for entry in tasks.values() if not entry.get("resumed")]
    cpu = [entry.get("cpu_s") for entry in measured]
    queries = sum(int(entry.get("queries", 0)) for entry in measured)
    cpu_total = None if not cpu or any(value is None for value in cpu) else math.fsum(v for v in cpu if v is not None)
    return {
        "scheme": SCHEME,
        "source": source,
        "machine": {"cpus": os.cpu_count() or 1, "fingerprint": fingerprint},
        "tasks": dict(tasks),
        "total": {"cpu_s": cpu_total, "queries": queries, "cpu_s_per_1000_queries": per_thousand_queries(cpu_total, queries)},
    }
