"""The writable ``/output`` folder, with a size cap the kernel enforces where it can.

As root the folder is a fresh tmpfs of the cap's size, so writing past it fails
inside the container. Where mounting is not permitted the folder is a plain
directory; the per-file ``fsize`` ulimit and a size check after the run bound it
instead. The report records which enforcement was in force.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OutputDir:
    """A prepared ``/output`` folder."""

    path: Path
    cap_bytes: int
    enforcement: str  # "tmpfs" or "fsize-ulimit"

    def used_bytes(self) -> int:
        """Bytes used by regular files inside (links are not followed)."""
        total = 0
        for root, _dirs, files in os.walk(self.path, followlinks=False):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_size
                except OSError:
                    continue
        return total

    def full(self) -> bool:
        """Whether the container filled (or overfilled) its cap."""
        if self.enforcement == "tmpfs":
            stats = os.statvfs(self.path)
            return stats.f_bavail * stats.f_frsize < 64 * 1024
        return self.used_bytes() >= self.cap_bytes


def _try_mount_tmpfs(path: Path, cap_bytes: int) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={cap_bytes},mode=0777,nosuid,nodev,noexec", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


@contextlib.contextmanager
def output_dir(parent: Path | None, cap_bytes: int) -> Iterator[OutputDir]:
    """A capped, world-writable output folder, removed (and unmounted) afterwards."""
    path = Path(tempfile.mkdtemp(prefix="grader-output-", dir=parent))
    mounted = _try_mount_tmpfs(path, cap_bytes)
    if not mounted:
        os.chmod(path, 0o777)
    try:
        yield OutputDir(path, cap_bytes, "tmpfs" if mounted else "fsize-ulimit")
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
        shutil.rmtree(path, ignore_errors=True)
