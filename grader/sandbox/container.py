"""One hardened container run: create, start, time, collect state and logs, remove.

The grader's own wall-clock timer kills the container at the time limit (the
SDK's wait timeout is a socket timeout, not a timer). OOM is read from the
container's ``OOMKilled`` state, never guessed from exit code 137, which a kill
at the time limit produces too.

Each container is labelled with its owner (pid, start time, host, boot: see
:mod:`grader.sandbox.owner`) and watched by a separate watchdog process
(:mod:`grader.sandbox.watchdog`) that kills it a few seconds past its time
limit, or at once if the grader dies, even by SIGKILL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.errors import SandboxUnavailable
from grader.files import atomic_write_bytes
from grader.sandbox import watchdog
from grader.sandbox.cpus import container_cpuset
from grader.sandbox.engine import docker_client, engine_lost
from grader.sandbox.limits import SandboxLimits
from grader.sandbox.owner import Owner
from grader.sandbox.usage import CgroupSampler, ResourceUsage

log = logging.getLogger(__name__)

#: Working user files may not exceed this in /tmp, and nothing may exec from it.
_TMPFS_OPTIONS = "rw,nosuid,nodev,noexec,size={size}"


@dataclass(frozen=True)
class Mount:
    """A host folder bound into the container."""

    source: Path
    target: str
    read_only: bool


@dataclass(frozen=True)
class ContainerOutcome:
    """How a container ended."""

    exit_code: int | None
    timed_out: bool
    oom_killed: bool
    elapsed_s: float
    stderr_tail: str
    log_path: Path | None
    #: CPU seconds and peak memory read from the container's cgroup while it ran (the report's ``cost`` block only)
    usage: ResourceUsage | None = None


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:500]
    return ""


def _create(client: Any, config: dict[str, Any], cpuset: str | None) -> Any:
    """Create the container, on the CPUs ``cpuset`` when one is given (:mod:`grader.sandbox.cpus`).

    An engine that cannot place it there (its own cgroup leaves those CPUs out, no cpuset controller) gets it
    without one, and the worker's log says so: pinning is where a grade runs, never whether it runs.
    """
    import docker.errors

    if cpuset is not None:
        try:
            return client.containers.create(**config, cpuset_cpus=cpuset)
        except docker.errors.APIError as exc:
            log.warning("the engine cannot run the container on CPUs %s (%s): running it on any CPU", cpuset, exc.explanation or exc)
    try:
        return client.containers.create(**config)
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(f"the engine refused to create the container: {exc.explanation or exc}") from None


@engine_lost("while a container ran")
def run_container(
    image_id: str,
    *,
    mounts: list[Mount],
    limits: SandboxLimits,
    log_path: Path | None = None,
    environment: dict[str, str] | None = None,
    command: list[str] | None = None,
    user: str | None = None,
    tmp_path: Path | None = None,
    scratch_folders: list[Path] | None = None,
    tick: Callable[[], None] | None = None,
    tick_every_s: float = 1.0,
) -> ContainerOutcome:
    """Run ``image_id``'s entrypoint under the sandbox's hardening and wait for it, at most ``limits.time_limit_s``.

    ``tmp_path`` is a capped disk-backed folder for ``/tmp``; without it ``/tmp``
    is a tmpfs, whose cap is added to the memory limit (a tmpfs is charged to
    memory). ``scratch_folders`` are owned folders the watchdog removes if the
    grader dies. The engine's loss mid-run is :class:`SandboxUnavailable`, as its refusals are.
    ``tick`` is called about every ``tick_every_s`` while the container runs, on this thread (it must not raise):
    a look at what the container reports of its progress (:mod:`grader.sandbox.progress_file`).
    """
    import docker.errors
    import requests.exceptions
    from docker.types import LogConfig, Ulimit
    from docker.types import Mount as DockerMount

    client = docker_client()
    memory = limits.memory_bytes if tmp_path is not None else limits.memory_bytes + limits.tmp_bytes
    mounts_all = [DockerMount(target=m.target, source=str(m.source), type="bind", read_only=m.read_only) for m in mounts]
    if tmp_path is not None:
        mounts_all.append(DockerMount(target="/tmp", source=str(tmp_path), type="bind", read_only=False))
    config: dict[str, Any] = dict(
        image=image_id,
        command=command,
        detach=True,
        network_mode="none",
        read_only=True,
        tmpfs={} if tmp_path is not None else {"/tmp": _TMPFS_OPTIONS.format(size=limits.tmp_bytes)},
        mounts=mounts_all,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=limits.pids,
        mem_limit=memory,
        memswap_limit=memory,
        nano_cpus=int(limits.cpus * 1e9),
        ulimits=[
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="fsize", soft=limits.output_bytes, hard=limits.output_bytes),
        ],
        init=True,
        log_config=LogConfig(type=LogConfig.types.JSON, config={"max-size": str(limits.log_bytes), "max-file": "1"}),
        environment={"HOME": "/tmp", **(environment or {})},
        labels=Owner.current().labels(),
        stdin_open=False,
    )
    if user is not None:
        config["user"] = user
    if limits.runtime:
        config["runtime"] = limits.runtime
    container = _create(client, config, container_cpuset())
    guard = None
    try:
        # The watchdog exists before the container runs: no moment where a killed grader leaves it unwatched.
        guard = watchdog.spawn(container.id, limit_s=limits.time_limit_s, folders=scratch_folders or [])
        return _start_and_wait(container, limits, log_path, tick, tick_every_s)
    finally:
        try:
            container.remove(force=True)
        except (docker.errors.APIError, requests.exceptions.RequestException):
            pass  # gone already, or the engine with it: its watchdog removes it (and must not hide why the run ended)
        if guard is not None:
            watchdog.stop(guard)


def _wait_ticking(finished: threading.Event, limit_s: float, tick: Callable[[], None] | None, every_s: float) -> bool:
    """Whether ``finished`` was set within ``limit_s`` seconds; ``tick`` is called every ``every_s`` meanwhile."""
    if tick is None:
        return finished.wait(limit_s)
    deadline = time.monotonic() + limit_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return finished.is_set()
        if finished.wait(min(remaining, every_s)):
            return True
        tick()


def _start_and_wait(
    container: Any, limits: SandboxLimits, log_path: Path | None, tick: Callable[[], None] | None = None, tick_every_s: float = 1.0
) -> ContainerOutcome:
    import docker.errors

    finished = threading.Event()

    def wait() -> None:
        # The wait call can fail while the container still runs (a dropped connection, a busy engine). Ending
        # the task then would read a running container as "exit status None" and remove it: wait again instead,
        # so that only the container's end (or the grader's timer) ends the task.
        while True:
            try:
                container.wait()
                break
            except Exception:
                try:
                    container.reload()
                except Exception:  # gone, or the engine lost it: the state read afterwards says which
                    break
                if not (container.attrs.get("State") or {}).get("Running"):
                    break
                time.sleep(0.5)
        finished.set()

    started = time.monotonic()
    try:
        container.start()
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(f"the engine refused to start the container: {exc.explanation or exc}") from None
    # The engine removes the cgroup as the container exits: its figures are read while it runs.
    sampler = CgroupSampler(container.id).start()
    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    timed_out = not _wait_ticking(finished, limits.time_limit_s, tick, tick_every_s)
    if timed_out:
        try:
            container.kill()
        except docker.errors.APIError:
            pass
        finished.wait(30)
    elapsed = time.monotonic() - started
    usage = sampler.stop()
    try:
        container.reload()
        state = container.attrs.get("State", {})
        stderr = container.logs(stdout=False, stderr=True, tail=200).decode("utf-8", "replace")
        if log_path is not None:
            logs = container.logs(stdout=True, stderr=True)[-limits.log_bytes :]
            atomic_write_bytes(log_path, logs)
    except docker.errors.APIError as exc:
        raise SandboxUnavailable(f"the engine lost the container: {exc.explanation or exc}") from None
    exit_code = None if state.get("Running") else state.get("ExitCode")
    return ContainerOutcome(
        exit_code=exit_code,
        timed_out=timed_out,
        oom_killed=bool(state.get("OOMKilled")) and not timed_out,
        elapsed_s=elapsed,
        stderr_tail=_last_line(stderr),
        log_path=log_path,
        usage=usage,
    )
