"""Resource limits of a sandboxed task, with defaults a host can override."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from grader.errors import UsageError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes of ``4g``, ``512m``, ``1.5G``, ``1048576`` (binary units, as Docker reads them)."""
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"not a size: {text!r} (examples: 4g, 512m, 1048576)")
    value = int(float(match[1]) * _UNITS[match[2].lower()])
    if value <= 0:
        raise UsageError(f"size must be positive: {text!r}")
    return value


@dataclass(frozen=True)
class SandboxLimits:
    """What one task's container may use. Memory and swap are one limit (no swap)."""

    time_limit_s: float = 3600.0
    memory_bytes: int = 8 << 30
    cpus: float = 2.0
    pids: int = 256
    nofile: int = 1024
    output_bytes: int = 2 << 30
    tmp_bytes: int = 1 << 30
    log_bytes: int = 10 << 20
    runtime: str | None = None

    def as_report(self) -> dict[str, Any]:
        """The limits as the report records them."""
        return {key: value for key, value in asdict(self).items() if value is not None}


def limits_from_options(
    *, time_limit: float | None, memory: str | None, cpus: float | None, runtime: str | None, base: SandboxLimits = SandboxLimits()
) -> SandboxLimits:
    """Apply a host's command-line overrides to the defaults."""
    values = asdict(base)
    if time_limit is not None:
        if time_limit <= 0:
            raise UsageError("--time-limit must be positive")
        values["time_limit_s"] = float(time_limit)
    if memory is not None:
        values["memory_bytes"] = parse_size(memory)
    if cpus is not None:
        if cpus <= 0:
            raise UsageError("--cpus must be positive")
        values["cpus"] = float(cpus)
    if runtime is not None:
        values["runtime"] = runtime
    return SandboxLimits(**values)
