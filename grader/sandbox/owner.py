"""Who owns a sandbox container or a scratch folder, and whether that owner still lives.

Many graders may run on one machine at once (several users, CI jobs, tests), so
cleanup after a crash must only touch what a *dead* grader left. An owner is a
process identified by its pid **and** its start time (``/proc/PID/stat`` field 22,
so a recycled pid is not mistaken for it) on one host and one boot
(``/proc/sys/kernel/random/boot_id``). Containers carry the owner as labels;
scratch folders carry it in an ``owner.json`` file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from grader import jsonio

#: Every sandbox container carries this label (tests/sandbox_support.py finds containers by it).
SANDBOX_LABEL = "dev.grader.sandbox"
_LABEL_PREFIX = "dev.grader.owner."
OWNER_FILE = "owner.json"


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: fields resume after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


@cache
def boot_id() -> str:
    """This boot's id (changes at every reboot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return "unknown"


@dataclass(frozen=True)
class Owner:
    """A grader process: pid, start time, host and boot."""

    pid: int
    start: str
    host: str
    boot: str

    @classmethod
    def current(cls) -> Owner:
        """This process."""
        pid = os.getpid()
        return cls(pid, process_start(pid) or "unknown", socket.gethostname(), boot_id())

    def is_local(self) -> bool:
        """Whether this owner ran on this host (only then can its liveness be judged here)."""
        return self.host == socket.gethostname()

    def alive(self) -> bool:
        """Whether the owner process still runs (a different boot means it does not)."""
        if self.boot != boot_id():
            return False
        return process_start(self.pid) == self.start

    def labels(self) -> dict[str, str]:
        """Container labels naming this owner."""
        return {SANDBOX_LABEL: "1", **{_LABEL_PREFIX + name: str(value) for name, value in asdict(self).items()}}

    @classmethod
    def from_labels(cls, labels: dict[str, str] | None) -> Owner | None:
        """The owner a container's labels name, or None (not a container of an owner-aware grader)."""
        labels = labels or {}
        try:
            return cls(
                int(labels[_LABEL_PREFIX + "pid"]), labels[_LABEL_PREFIX + "start"], labels[_LABEL_PREFIX + "host"], labels[_LABEL_PREFIX + "boot"]
            )
        except (KeyError, ValueError):
            return None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Owner | None:
        try:
            return cls(int(data["pid"]), str(data["start"]), str(data["host"]), str(data["boot"]))
        except (KeyError, ValueError, TypeError):
            return None


def read_owner_file(folder: Path) -> Owner | None:
    """The owner recorded in ``folder/owner.json``, or None."""
    try:
        with open(folder / OWNER_FILE, "rb") as handle:
            return Owner.from_json(jsonio.loads(handle.read(4096)))
    except (OSError, ValueError):  # jsonio.JsonError is a ValueError
        return None


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below ``folder`` (deepest first), from ``/proc/self/mounts``."""
    prefix = str(folder)
    found = []
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            for row in handle:
                parts = row.split()
                if len(parts) < 2:
                    continue
                point = parts[1].encode("latin-1", "replace").decode("unicode_escape")
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(point)
    except OSError:
        return []
    return sorted(set(found), key=len, reverse=True)


def remove_owned_folder(folder: Path) -> None:
    """Unmount whatever is mounted below ``folder`` (loop images detach with it), then remove it."""
    for point in mounts_under(folder):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def owned_tempdir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A fresh temporary folder that names this process as its owner; unmounted and removed afterwards.

    If this process dies before removing it, a later grader start (or the
    task's watchdog) sees the dead owner and removes it.
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        jsonio.write_json(folder / OWNER_FILE, Owner.current().as_json(), indent=None, ensure_ascii=True, mode=0o644)
        yield folder
    finally:
        remove_owned_folder(folder)
