"""Sweep what dead graders left: sandbox containers, ``/output`` and ``/tmp`` mounts, staged task data.

A grader that is SIGKILLed (or loses power) cannot clean up; its per-container
watchdog normally does it within a second, but the watchdog can die with it (a
cgroup-wide kill). So every ``grader run`` starts by sweeping: containers
labelled with an owner on this host whose process is gone, and scratch folders
(``grader-stage-*``, ``grader-output-*``, ``grader-encode-*``) in the temporary folder whose
``owner.json`` names a dead process. Nothing of a live process is touched, so
concurrent graders on one machine are safe; containers without owner labels
(older graders) are left alone.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox.owner import SANDBOX_LABEL, Owner, read_owner_file, remove_owned_folder

#: Prefixes of the scratch folders the grader makes (staging, and /output + /tmp storage).
SCRATCH_PREFIXES = ("grader-stage-", "grader-output-", "grader-encode-")


@dataclass(frozen=True)
class Swept:
    """What a sweep removed."""

    containers: int
    folders: int

    def __bool__(self) -> bool:
        return bool(self.containers or self.folders)


def _dead(owner: Owner | None) -> bool:
    return owner is not None and owner.is_local() and not owner.alive()


def sweep_containers() -> int:
    """Remove sandbox containers whose owner process on this host is gone; returns how many."""
    import docker.errors

    from grader.sandbox.engine import docker_client

    removed = 0
    # sparse: the list data carries the labels; no inspect that could race another grader's removal.
    for container in docker_client().containers.list(all=True, sparse=True, filters={"label": f"{SANDBOX_LABEL}=1"}):
        if _dead(Owner.from_labels(container.attrs.get("Labels"))):
            try:
                container.remove(force=True)
                removed += 1
            except docker.errors.APIError:
                pass  # already gone (its watchdog, or another sweeping grader)
    return removed


def sweep_folders(root: Path | None = None) -> int:
    """Remove scratch folders under ``root`` (default: the temporary folder) whose owner is gone."""
    base = Path(root or tempfile.gettempdir())
    removed = 0
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(SCRATCH_PREFIXES) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return 0
    for folder in candidates:
        if _dead(read_owner_file(folder)):
            remove_owned_folder(folder)
            removed += 1
    return removed


def sweep(*, containers: bool = True, root: Path | None = None) -> Swept:
    """Sweep containers (when an engine is wanted) and scratch folders left by dead graders."""
    count = 0
    if containers:
        from grader.errors import SandboxUnavailable
        from grader.sandbox.engine import engine_available

        if engine_available():
            try:
                count = sweep_containers()
            except SandboxUnavailable:
                count = 0
    return Swept(count, sweep_folders(root))
