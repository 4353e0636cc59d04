"""The writable ``/output`` and ``/tmp`` of a container, with caps that are not paid for in memory.

A tmpfs is charged to the container's memory cgroup, so a tmpfs ``/output`` of
2 GiB under an 8 GiB memory limit leaves a participant 6 GiB, and a container
that fills it is killed as ``OOM``, not stopped as ``OUTPUT_TOO_LARGE``. So:

* **As root** (``mount`` and ``mkfs.ext4`` available): each is a sparse ext4
  image file of exactly the cap, loop-mounted ``nosuid,nodev,noexec`` and bound
  into the container. The data lives on disk; writing past the cap fails with
  ``ENOSPC`` inside the container; enforcement ``disk-image``. A few percent of
  the cap go to file-system metadata, so the usable space is slightly below it.
* **Otherwise**: ``/output`` is a plain folder bounded by the per-file ``fsize``
  ulimit and a size check after the run (enforcement ``fsize-ulimit``), and
  ``/tmp`` stays a tmpfs whose cap is *added* to the memory limit
  (``tmp: tmpfs, memory raised``), so the memory a participant reads about is
  what their processes get.

The scratch folder names its owner (``owner.json``), so a sweep removes it if
the grader dies (:mod:`grader.sandbox.sweep`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from grader.sandbox.owner import owned_tempdir

DISK_IMAGE = "disk-image"
FSIZE_ULIMIT = "fsize-ulimit"
TMPFS_MEMORY_RAISED = "tmpfs-memory-raised"
#: Free space an ext4 image keeps for itself; "full" means less than this is left.
_FULL_SLACK = 256 * 1024


@dataclass(frozen=True)
class OutputDir:
    """A prepared ``/output`` folder (and the ``/tmp`` that goes with it)."""

    path: Path
    cap_bytes: int
    enforcement: str  # DISK_IMAGE or FSIZE_ULIMIT
    tmp_path: Path | None = None  # a disk-backed /tmp, or None: a tmpfs charged to (and added to) memory
    scratch: Path | None = None  # the owned folder holding both (for the watchdog)

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
        if self.enforcement == DISK_IMAGE:
            stats = os.statvfs(self.path)
            return stats.f_bavail * stats.f_frsize < _FULL_SLACK or stats.f_favail == 0
        return self.used_bytes() >= self.cap_bytes


@cache
def disk_images_supported() -> bool:
    """Whether this grader can loop-mount capped ext4 images (root, with mount and mkfs.ext4)."""
    return os.geteuid() == 0 and shutil.which("mount") is not None and shutil.which("mkfs.ext4") is not None and os.path.exists("/dev/loop-control")


def storage_report() -> dict[str, object]:
    """How ``/output`` and ``/tmp`` will be capped on this host (recorded in the report)."""
    if disk_images_supported():
        return {"output": DISK_IMAGE, "tmp": DISK_IMAGE}
    return {"output": FSIZE_ULIMIT, "tmp": TMPFS_MEMORY_RAISED}


def _mount_image(folder: Path, name: str, cap_bytes: int) -> Path | None:
    """A loop-mounted ext4 image of ``cap_bytes`` at ``folder/name``, world-writable; None if that fails."""
    image = folder / f"{name}.img"
    point = folder / name
    point.mkdir()
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if free < cap_bytes:
        return None  # a sparse image the disk cannot back would fail with I/O errors, not ENOSPC
    with open(image, "wb") as handle:
        handle.truncate(cap_bytes)
    # No journal and no reserved blocks: the whole cap is for the container; inodes bound file counts.
    inodes = str(max(1024, min(1 << 20, cap_bytes // (16 << 10))))
    made = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-N", inodes, "-E", "lazy_itable_init=1,nodiscard", str(image)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        return None
    mounted = subprocess.run(["mount", "-o", "loop,nosuid,nodev,noexec", str(image), str(point)], capture_output=True, check=False)
    if mounted.returncode != 0:
        return None
    os.chmod(point, 0o1777 if name == "tmp" else 0o777)
    shutil.rmtree(point / "lost+found", ignore_errors=True)
    return point


@contextlib.contextmanager
def output_dir(parent: Path | None, cap_bytes: int, tmp_bytes: int | None = None) -> Iterator[OutputDir]:
    """A capped, world-writable ``/output`` (and, with ``tmp_bytes``, a capped ``/tmp``); removed and unmounted afterwards."""
    with owned_tempdir("grader-output-", parent) as scratch:
        output = _mount_image(scratch, "output", cap_bytes) if disk_images_supported() else None
        tmp = None
        if output is not None and tmp_bytes is not None:
            tmp = _mount_image(scratch, "tmp", tmp_bytes)
        if output is None:
            output = scratch / "output"
            output.mkdir(exist_ok=True)
            os.chmod(output, 0o777)
        yield OutputDir(output, cap_bytes, DISK_IMAGE if output.is_mount() else FSIZE_ULIMIT, tmp, scratch)
