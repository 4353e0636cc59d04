"""Energy of a task from RAPL, where the machine exposes it and the figure can be attributed; else why not.

RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``) counts the energy of a whole CPU
*package*: every process on it, the grader's own and its neighbours', not only the
encoder. Since 2020 kernels make the counter root-only (a side channel). So:

* no RAPL folder (a VM, an ARM or AMD machine without the driver): ``joules`` null, and why;
* the counter unreadable (not root): null, and why;
* readable: the package's joules over the task are a figure for the *package*, which the
  grade may not claim as its own unless the machine ran nothing else. The grader cannot know
  that, so ``joules`` stays null unless the operator says so (``GRADER_RAPL_DEDICATED=1``:
  this machine grades and does nothing else); the reason then names the package figure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_RAPL = Path("/sys/class/powercap")
#: The operator's statement that the machine runs nothing but the grade, so the package's energy is the grade's.
DEDICATED_ENV = "GRADER_RAPL_DEDICATED"


@dataclass(frozen=True)
class EnergyReading:
    """A task's energy in joules, or None with the reason."""

    joules: float | None
    reason: str


def _packages(root: Path) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if p.name.startswith("intel-rapl:") and p.name.count(":") == 1)
    except OSError:
        return []


class EnergyMeter:
    """Reads the RAPL package counters at a task's start and end (:meth:`start`, :meth:`stop`)."""

    def __init__(self, root: Path = _RAPL) -> None:
        self._root = root
        self._start: list[tuple[int, int]] | None = None
        self._reason: str | None = None

    def _read(self) -> list[tuple[int, int]] | str:
        """(energy_uj, max_energy_range_uj) of each package, or why they cannot be read."""
        packages = _packages(self._root)
        if not packages:
            return "no RAPL counters on this machine (/sys/class/powercap/intel-rapl:* absent)"
        readings = []
        for package in packages:
            try:
                energy = int((package / "energy_uj").read_text())
                wrap = int((package / "max_energy_range_uj").read_text())
            except PermissionError:
                return "RAPL counters are root-only on this machine (energy_uj unreadable)"
            except (OSError, ValueError):
                return f"{package.name}/energy_uj could not be read"
            readings.append((energy, wrap))
        return readings

    def start(self) -> EnergyMeter:
        found = self._read()
        if isinstance(found, str):
            self._reason = found
        else:
            self._start = found
        return self

    def stop(self) -> EnergyReading:
        """The packages' joules since :meth:`start` (a counter wrap counted once), attributed only on a dedicated machine."""
        if self._start is None:
            return EnergyReading(None, self._reason or "not started")
        end = self._read()
        if isinstance(end, str) or len(end) != len(self._start):
            return EnergyReading(None, end if isinstance(end, str) else "the RAPL packages changed during the task")
        micro = sum((after - before) % wrap if wrap > 0 else after - before for (before, wrap), (after, _) in zip(self._start, end))
        joules = micro / 1e6
        if os.environ.get(DEDICATED_ENV) == "1":
            return EnergyReading(joules, f"RAPL, every CPU package; attributed by the operator ({DEDICATED_ENV}=1: nothing else runs here)")
        return EnergyReading(
            None,
            f"RAPL measures whole CPU packages ({joules:.1f} J over the task, other processes included): "
            f"not attributable unless the operator sets {DEDICATED_ENV}=1",
        )
