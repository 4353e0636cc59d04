"""A grader that is stopped or killed leaves nothing running, mounted or staged; output is not memory.

Real containers and real signals: ``grader run`` runs as a separate process
(with its temporary folder under the test's own folder), the test waits until
its container runs, then sends SIGTERM or SIGKILL and checks the host:

* SIGTERM (and SIGHUP) clean up like SIGINT: container removed, ``/output``
  and ``/tmp`` images unmounted, staged hidden data removed, exit 128 + signal.
* After SIGKILL the per-container watchdog removes the container within a few
  seconds, far before its time limit, and then the scratch folders.
* If the watchdog dies too (a cgroup-wide kill), the next grader start sweeps the
  container, mounts and folders; a live grader's container is never swept.
* Writing more into ``/output`` than the memory limit could hold is
  ``OUTPUT_TOO_LARGE``, not ``OOM``: the caps are disk-backed, not tmpfs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import docker.errors
import pytest

from grader.errors import TaskFailure
from grader.grading.sandboxed import run_and_collect
from tests.sandbox_support import (
    SANDBOX_LABEL,
    HostGuard,
    docker_submission,
    image_of,
    is_under,
    mount_points,
    read_log,
    small_limits,
    stage_small,
    write_benchmark,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]

REPO = Path(__file__).resolve().parent.parent
#: Generous waits: on a loaded 2-core CI machine a grader's start (imports, sweep, staging, two ext4 images,
#: create, start) or its cleanup takes seconds, sometimes tens of them. Each wait ends as soon as its condition holds.
START_S = 180.0
CLEANUP_S = 120.0


class Grader:
    """``grader run`` of the sleeper image as a child process, with its temp folder under the test's.

    The time limit is far above any wait here: the container is still running when a test signals its grader.
    A grader a test did not end itself (it failed first) is ended by :func:`_end_leftover_graders`.
    """

    started: ClassVar[list[Grader]] = []

    def __init__(self, guard: HostGuard, *, time_limit: float = 600.0, name: str = "run", by_owner_label: bool = False) -> None:
        root = guard.root
        self.guard = guard
        self.by_owner_label = by_owner_label
        self.bench = write_benchmark(root / f"bench-{name}", ["sleepy"])
        self.submission = docker_submission(root / f"sub-{name}", image_of("sleeper"))
        self.out = root / f"out-{name}"
        env = {**os.environ, "TMPDIR": str(guard.private_tmp), "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from grader.cli.main import main; main()",
                "run",
                str(self.submission),
                "--benchmark",
                str(self.bench),
                "--out",
                str(self.out),
                "--sandbox",
                "docker",
                "--time-limit",
                str(time_limit),
                "--memory",
                "256m",
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        Grader.started.append(self)

    def containers(self) -> list[Any]:
        """This grader's containers: by owner label when a test runs several graders, else all of the test's."""
        if not self.by_owner_label:
            return self.guard.own_containers()
        label = f"dev.grader.owner.pid={self.process.pid}"
        return self.guard.client.containers.list(all=True, sparse=True, filters={"label": [f"{SANDBOX_LABEL}=1", label]})

    def wait_running(self, timeout: float = START_S) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                stdout, stderr = self.process.communicate()
                raise AssertionError(f"the grader ended (exit {self.process.returncode}) before its container ran: {stdout!r} {stderr!r}")
            for container in self.containers():
                try:
                    container.reload()
                except docker.errors.NotFound:
                    # Listed, then removed before this inspect (the grader ended its task meanwhile):
                    # the next turn's poll() then says why, with the grader's own output.
                    continue
                if container.attrs["State"].get("Running"):
                    return container
            time.sleep(0.1)
        raise AssertionError(f"the grader's container never ran within {timeout:g} s")

    def scratch(self) -> list[Path]:
        return sorted(p for p in self.guard.private_tmp.iterdir() if p.name.startswith("grader-"))

    def verify(self) -> None:
        """HostGuard.verify, less a ``.ses`` file some native library of the process writes into TMPDIR at start."""
        (self.guard.private_tmp / ".ses").unlink(missing_ok=True)
        self.guard.verify()

    def watchdogs(self) -> list[int]:
        """Pids of the watchdog processes this grader started (found by their command line)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"grader.sandbox.watchdog" in cmdline and any(f'"pid": {self.process.pid},'.encode() in part for part in cmdline):
                found.append(int(entry.name))
        return found


@pytest.fixture(autouse=True)
def _end_leftover_graders() -> Any:
    """After each test, end any grader it started and did not end (it failed first).

    SIGTERM first, so that it cleans up its container, mounts and folders like a stopped grader; SIGKILL
    if it does not end. Otherwise it would outlive the test (its own session) with a running container and
    mounts under a tmp_path that pytest later moves away, and disturb the tests that follow.
    """
    yield
    while Grader.started:
        process = Grader.started.pop().process
        if process.poll() is not None:
            continue
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=CLEANUP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def _gone_within(grader: Grader, seconds: float) -> float:
    started = time.monotonic()
    while grader.containers():
        assert time.monotonic() - started < seconds, f"container still there after {seconds} s: {[c.short_id for c in grader.containers()]}"
        time.sleep(0.2)
    return time.monotonic() - started


@pytest.mark.docker(image_of("sleeper"))
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_clean_up_like_sigint(guard: HostGuard, signum: int) -> None:
    grader = Grader(guard)
    grader.wait_running()
    assert grader.scratch(), "staging and /output folders exist while the task runs"
    assert [p for p in mount_points() if is_under(p, guard.private_tmp)], "/output is mounted while the task runs"
    os.kill(grader.process.pid, signum)
    _, stderr = grader.process.communicate(timeout=CLEANUP_S)
    assert grader.process.returncode == 128 + signum, stderr
    assert f"stopped by {signal.Signals(signum).name}" in stderr.decode()
    assert grader.containers() == []
    grader.verify()  # no container, no mount under the test folder, no scratch folder left
    assert not (grader.out / "report.json").exists()


@pytest.mark.docker(image_of("sleeper"))
def test_sigkill_of_the_grader_leaves_no_container_running(guard: HostGuard) -> None:
    time_limit = 120.0
    grader = Grader(guard, time_limit=time_limit)
    grader.wait_running()
    os.kill(grader.process.pid, signal.SIGKILL)
    grader.process.communicate(timeout=CLEANUP_S)
    # The watchdog sees its grader gone and removes the container: seconds, not the 120 s limit (nor the 3600 s sleep).
    # Only the watchdog can remove it (at the limit it would only kill it: removing is the grader's part), so any
    # bound below the limit proves the watchdog acted; 30 s leaves room for a loaded engine.
    _gone_within(grader, 30.0)
    deadline = time.monotonic() + 60
    while (grader.scratch() or [p for p in mount_points() if is_under(p, guard.private_tmp)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    grader.verify()  # staged hidden data and the /output, /tmp images are gone too


@pytest.mark.docker(image_of("sleeper"))
def test_a_killed_watchdog_still_ends_the_container_at_the_limit_and_the_next_start_sweeps(guard: HostGuard) -> None:
    """The cgroup-wide kill: grader and watchdog both SIGKILLed. The next start sweeps; a live grader is untouched."""
    from grader.sandbox.owner import Owner
    from grader.sandbox.sweep import sweep

    live = Grader(guard, name="live", by_owner_label=True)
    dead = Grader(guard, name="dead", by_owner_label=True)
    live.wait_running()
    dead.wait_running()
    watchdogs = dead.watchdogs()
    assert watchdogs
    # The watchdogs first: killed after the grader, one could see its grader gone and clean up before its own kill.
    for pid in watchdogs:
        os.kill(pid, signal.SIGKILL)
    os.kill(dead.process.pid, signal.SIGKILL)
    dead.process.communicate(timeout=CLEANUP_S)
    time.sleep(1.0)
    assert dead.containers(), "with its watchdog killed too, the dead grader's container is still there"
    leftovers = [p for p in mount_points() if is_under(p, guard.private_tmp)]
    assert leftovers, "and its /output, /tmp images are still mounted"

    swept = sweep(root=guard.private_tmp)
    assert swept.containers >= 1 and swept.folders == 2  # its staging folder and its /output + /tmp folder
    assert dead.containers() == []
    live_container = live.wait_running()  # the live grader's container and folders were not touched
    assert live_container.attrs["State"]["Running"]
    assert all(Owner.from_labels(c.attrs.get("Labels")) is not None for c in live.containers())

    os.kill(live.process.pid, signal.SIGTERM)
    live.process.communicate(timeout=CLEANUP_S)
    assert live.process.returncode == 128 + signal.SIGTERM
    live.verify()


@pytest.mark.docker(image_of("bigwriter"))
def test_output_larger_than_the_memory_headroom_is_output_too_large_not_oom(guard: HostGuard) -> None:
    """Scaled from the observation (448 MB into /output under --memory 512m): 320 MiB under 128 MiB, cap 192 MiB."""
    if os.geteuid() != 0:
        pytest.skip("disk-backed caps need root with mount and mkfs.ext4; without them /output is a plain folder (not memory) anyway")
    root = guard.root
    staged = stage_small(root / "input")
    scratch = root / "scratch"
    scratch.mkdir()
    cap = 192 << 20
    limits = small_limits(memory_bytes=128 << 20, output_bytes=cap, time_limit_s=60.0)
    with pytest.raises(TaskFailure) as failure:
        run_and_collect(
            image_of("bigwriter"),
            staged,
            mode="retrieve",
            limits=limits,
            log_path=root / "bigwriter.log",
            scratch=scratch,
            environment={"BIGWRITER_MAX_MB": "320", "BIGWRITER_MAX_FILES": "10"},
        )
    assert failure.value.code == "OUTPUT_TOO_LARGE", failure.value
    log = read_log(root / "bigwriter.log")
    written = int(log.split("bigwriter: run.jsonl: ")[1].split()[0])
    assert 128 < written <= cap >> 20, log  # more than the memory limit was written, and no more than the cap
    assert "No space left" in log
    assert list(scratch.iterdir()) == []
    guard.verify()


@pytest.mark.docker(image_of("bigwriter"))
def test_tmp_is_disk_backed_and_capped(guard: HostGuard, tmp_path: Path) -> None:
    """/tmp too: capped by its own size, not charged to memory, and the memory limit is the one asked for."""
    from grader.sandbox.container import Mount, run_container
    from grader.sandbox.output_dir import disk_images_supported, output_dir
    from tests.sandbox_support import BASE_IMAGE

    if not disk_images_supported():
        pytest.skip("disk-backed caps need root with mount and mkfs.ext4")
    limits = small_limits(memory_bytes=96 << 20, tmp_bytes=160 << 20, output_bytes=512 << 20)  # fsize ulimit = output cap
    script = "dd if=/dev/zero of=/tmp/fill bs=1M count=400 2>&1 | tail -1; echo used=$(du -m /tmp/fill | cut -f1)"
    with output_dir(tmp_path, limits.output_bytes, limits.tmp_bytes) as output:
        assert output.tmp_path is not None
        outcome = run_container(
            BASE_IMAGE,
            mounts=[Mount(output.path, "/output", False)],
            limits=limits,
            log_path=tmp_path / "tmp.log",
            command=["/bin/sh", "-c", script],
            user="10001",
            tmp_path=output.tmp_path,
        )
    log = (tmp_path / "tmp.log").read_text()
    assert not outcome.oom_killed, log
    used = int(log.split("used=")[1].split()[0])
    assert 96 < used <= 160, log
    guard.verify()
