"""What one encoder run used: CPU seconds and peak memory, measured, or None with the reason.

Two sources, one shape (:class:`ResourceUsage`):

* a container's cgroup (:class:`CgroupSampler`): cgroup v2 ``cpu.stat`` (``usage_usec``) and
  ``memory.peak`` (kernel 5.19 or later), or cgroup v1 ``cpuacct.usage`` and
  ``memory.max_usage_in_bytes``. The engine removes a container's cgroup the moment its
  last process exits, before the grader can read it, so the files are *sampled* while it
  runs: the CPU figure is a lower bound (the last interval is missed), the peak is the
  kernel's own high-water mark as of the last sample;
* an in-process encoder's child process: ``wait4``'s resource usage (user + system CPU, and
  ``ru_maxrss``, the kernel's peak resident set), exact.

These figures vary between runs of one grade, so they go to the report's ``cost`` block only,
never into anything a grade's determinism rests on.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

#: How often a container's cgroup is read while it runs.
SAMPLE_S = 0.1
#: Where the engines this grader knows put a container's cgroup (Docker: systemd or cgroupfs driver).
_V2_DIRS = ("system.slice/docker-{id}.scope", "docker/{id}")
_V1_DIRS = ("docker/{id}", "system.slice/docker-{id}.scope")


@dataclass(frozen=True)
class ResourceUsage:
    """CPU seconds and peak memory of one run, each None where it could not be measured (``missing`` says why)."""

    cpu_s: float | None
    peak_memory_bytes: int | None
    #: how the figures were obtained, in words (the report shows it)
    method: str
    #: field name -> why it is None
    missing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def unmeasured(cls, reason: str) -> ResourceUsage:
        """Neither figure: both None for ``reason``."""
        return cls(None, None, "none", {"cpu_s": reason, "peak_memory_bytes": reason})


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _v2_cpu_usec(folder: Path) -> int | None:
    try:
        for line in folder.joinpath("cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class _Files:
    """The files that hold one container's CPU time and memory high-water mark, and how to read them."""

    version: str
    cpu: Path
    memory: Path
    #: nanoseconds per unit of the CPU file's counter
    cpu_unit_ns: int


def cgroup_files(container_id: str, root: Path = Path("/sys/fs/cgroup")) -> _Files | str:
    """The container's cgroup files, or why there are none to read (a remote engine, another layout)."""
    if root.joinpath("cgroup.controllers").is_file():  # the unified hierarchy: cgroup v2
        for pattern in _V2_DIRS:
            folder = root / pattern.format(id=container_id)
            if folder.is_dir():
                return _Files("v2", folder / "cpu.stat", folder / "memory.peak", 1000)
        return "the container's cgroup v2 folder is not visible here (a remote engine, or another cgroup layout)"
    for pattern in _V1_DIRS:
        relative = pattern.format(id=container_id)
        memory = root / "memory" / relative
        for controller in ("cpuacct", "cpu,cpuacct"):
            cpu = root / controller / relative
            if cpu.is_dir() and memory.is_dir():
                return _Files("v1", cpu / "cpuacct.usage", memory / "memory.max_usage_in_bytes", 1)
    return "the container's cgroup is not visible here (a remote engine, or another cgroup layout)"


class CgroupSampler:
    """Reads a running container's CPU time and memory high-water mark every :data:`SAMPLE_S`, in a thread.

    Start it right after the container starts; :meth:`stop` once it has ended returns the last figures.
    """

    def __init__(self, container_id: str, root: Path = Path("/sys/fs/cgroup")) -> None:
        self._container_id = container_id
        self._root = root
        self._stopped = threading.Event()
        self._files: _Files | str = "the container ended before its cgroup was read"
        self._cpu_ns: int | None = None
        self._peak: int | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> CgroupSampler:
        self._thread.start()
        return self

    def _sample(self) -> None:
        if isinstance(self._files, str):
            self._files = cgroup_files(self._container_id, self._root)
            if isinstance(self._files, str):
                return
        files = self._files
        cpu = _v2_cpu_usec(files.cpu.parent) if files.version == "v2" else _read_int(files.cpu)
        peak = _read_int(files.memory)
        # Once the cgroup is gone the reads fail: keep the last figures read.
        if cpu is not None:
            self._cpu_ns = cpu * files.cpu_unit_ns
        if peak is not None:
            self._peak = max(peak, self._peak or 0)

    def _loop(self) -> None:
        self._sample()
        while not self._stopped.wait(SAMPLE_S):
            self._sample()

    def stop(self) -> ResourceUsage:
        """Stop sampling; the figures last read, each None with the reason where none was."""
        self._stopped.set()
        with contextlib.suppress(RuntimeError):  # never started
            self._thread.join(2)
        if isinstance(self._files, str):  # no cgroup folder was ever found: why
            return ResourceUsage.unmeasured(self._files)
        files = self._files
        missing: dict[str, str] = {}
        if self._cpu_ns is None:
            missing["cpu_s"] = f"{files.cpu.name} could not be read"
        if self._peak is None:
            missing["peak_memory_bytes"] = (
                "memory.peak needs cgroup v2 on kernel 5.19 or later" if files.version == "v2" else f"{files.memory.name} could not be read"
            )
        method = (
            f"cgroup {files.version} {files.cpu.name} and {files.memory.name}, sampled every {SAMPLE_S:g} s while the container ran "
            "(CPU: a lower bound, the last interval is missed)"
        )
        cpu_s = None if self._cpu_ns is None else self._cpu_ns / 1e9
        return ResourceUsage(cpu_s, self._peak, method, missing)
