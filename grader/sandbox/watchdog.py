"""A per-container watchdog that does not depend on the grader's process staying alive.

The grader kills a container at its time limit with its own timer; that timer
dies with the grader. So before a container starts, the grader launches this
module as a separate process in its own session (``start_new_session``: no
terminal signal or process-group kill aimed at the grader reaches it; when the
grader dies it is re-parented, not killed). It then:

* kills the container at ``deadline`` (the time limit plus a grace of a few
  seconds, so the grader's own timer normally acts first and classifies it);
* removes the container within about a second if the grader process dies
  (pid + start time, see :mod:`grader.sandbox.owner`), and then removes the
  scratch folders the grader gave it (unmounting ``/output`` and ``/tmp``
  images, deleting the staged hidden queries and corpus) -- only folders whose
  ``owner.json`` names that dead grader;
* exits when the container is gone (the grader removed it).

Why a host-side process rather than a ``timeout`` inside the container: the
container runs a participant's image with its own entrypoint, and the grader
cannot rely on any binary being in it, nor inject one without exposing it to
the untrusted process. The watchdog needs nothing from the image. Its one
blind spot is an external kill of every process of the grader's cgroup at once
(systemd ``KillMode=control-group`` ending in SIGKILL); for that case the next
grader start sweeps what is left (:mod:`grader.sandbox.sweep`), and a service
should use ``KillMode=mixed`` so the grader gets SIGTERM and cleans up itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.sandbox.owner import Owner, read_owner_file, remove_owned_folder

#: Seconds past the time limit before the watchdog acts (the grader's own timer comes first).
GRACE_S = 3.0
#: How often the watchdog looks at the grader and (less often) at the container.
_POLL_S = 0.25
_ENGINE_POLL_S = 2.0


def spawn(container_id: str, *, limit_s: float, folders: list[Path]) -> subprocess.Popen[bytes]:
    """Start the watchdog of ``container_id``, whose time limit ``limit_s`` counts from the container's start."""
    spec = {"container": container_id, "limit_s": limit_s, "owner": Owner.current().as_json(), "folders": [str(f) for f in folders]}
    return subprocess.Popen(
        [sys.executable, "-m", "grader.sandbox.watchdog", jsonio.dumps(spec, ensure_ascii=True)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    """End a watchdog whose container the grader has removed itself."""
    try:
        process.terminate()
        process.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def _container(container_id: str) -> Any:
    import docker
    import docker.errors

    client = docker.from_env(timeout=30)
    try:
        return client.containers.get(container_id)
    except docker.errors.NotFound:
        return None


def _deadline(container: Any, limit_s: float) -> float | None:
    """``StartedAt`` + limit + grace (wall clock), or None while the container has not started."""
    started = (container.attrs.get("State") or {}).get("StartedAt") or ""
    if not started or started.startswith("0001-"):
        return None
    try:
        # Docker writes nanoseconds; datetime takes microseconds.
        stamp = re.sub(r"(\.\d{6})\d*", r"\1", started.replace("Z", "+00:00"))
        return datetime.fromisoformat(stamp).timestamp() + limit_s + GRACE_S
    except ValueError:
        return time.time() + limit_s + GRACE_S


def watch(spec: dict[str, Any]) -> int:
    """Run the watchdog loop of one container; returns the process exit status."""
    import docker.errors

    owner = Owner.from_json(spec["owner"])
    if owner is None:
        return 2
    limit_s = float(spec["limit_s"])
    container = _container(spec["container"])
    deadline: float | None = None
    killed = False
    last_engine_poll = time.monotonic()
    while True:
        if not owner.alive():
            # Nobody else will remove the container or the scratch folders now.
            if container is not None:
                try:
                    container.remove(force=True)
                except docker.errors.APIError:
                    pass
            for folder in spec.get("folders", []):
                path = Path(folder)
                if read_owner_file(path) == owner:
                    remove_owned_folder(path)
            return 0
        if container is None:
            return 0
        if deadline is None and container is not None:
            deadline = _deadline(container, limit_s)
        if not killed and deadline is not None and time.time() >= deadline:
            try:
                container.kill()  # the grader, alive, reads its state and removes it
            except docker.errors.APIError:
                pass
            killed = True
        time.sleep(_POLL_S)
        if time.monotonic() - last_engine_poll >= _ENGINE_POLL_S:
            last_engine_poll = time.monotonic()
            try:
                container.reload()
            except docker.errors.NotFound:
                container = None
            except docker.errors.APIError:
                pass


def main(argv: list[str]) -> int:
    """``python -m grader.sandbox.watchdog SPEC_JSON``."""
    return watch(jsonio.loads(argv[0]))


if __name__ == "__main__":  # pragma: no cover - run as a separate process
    raise SystemExit(main(sys.argv[1:]))
