"""A container runs on the CPUs of the process that grades, when a host pinned it to fewer than all.

The rule (:func:`grader.sandbox.cpus.container_cpuset`) on given affinities; then real containers of the real
engine: started from a thread pinned to one CPU, the container's own ``/proc/self/status`` names that CPU alone;
from an unpinned thread, every CPU; and an engine that cannot place it (a CPU the machine lacks) runs it on any
CPU, with one line in the log, instead of failing the job.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from grader.sandbox import container as container_module
from grader.sandbox.container import run_container
from grader.sandbox.cpus import container_cpuset, engine_is_local
from tests.sandbox_support import BASE_IMAGE, read_log, small_limits

STATUS = ["/bin/sh", "-c", "grep '^Cpus_allowed_list' /proc/self/status"]


def test_a_narrower_affinity_is_the_cpuset_and_all_cpus_or_a_remote_engine_none() -> None:
    assert container_cpuset({1}, 2, local=True) == "1"
    assert container_cpuset({3, 0, 2}, 8, local=True) == "0,2,3"
    assert container_cpuset({0, 1}, 2, local=True) is None  # all of them: as the engine decides
    assert container_cpuset({1}, 2, local=False) is None  # a CPU number means nothing to another machine's engine
    assert engine_is_local({}) and engine_is_local({"DOCKER_HOST": "unix:///run/docker.sock"})
    assert not engine_is_local({"DOCKER_HOST": "tcp://10.0.0.5:2376"}) and not engine_is_local({"DOCKER_HOST": "ssh://grader@host"})


def _allowed_in_container(tmp_path: Path, name: str, pin: set[int] | None) -> str:
    """Run the status probe from a thread of its own (pinned to ``pin`` first, when given); the container's line."""
    log_path = tmp_path / f"{name}.log"
    result: dict[str, object] = {}

    def target() -> None:
        if pin is not None:
            os.sched_setaffinity(0, pin)  # this thread only: what a worker pinned with taskset gives its job processes
        try:
            result["outcome"] = run_container(BASE_IMAGE, mounts=[], limits=small_limits(), log_path=log_path, command=STATUS, user="10001")
        except Exception as error:  # surfaced below
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    assert not thread.is_alive() and "error" not in result, result.get("error")
    assert result["outcome"].exit_code == 0  # type: ignore[attr-defined]
    return read_log(log_path).strip()


def _cpu_list(cpus: list[int]) -> str:
    """The kernel's list form of consecutive CPUs (``0-1``) or one CPU (``1``)."""
    return str(cpus[0]) if len(cpus) == 1 else f"{cpus[0]}-{cpus[-1]}"


@pytest.mark.slow
@pytest.mark.docker(BASE_IMAGE)
@pytest.mark.usefixtures("docker_engine")
def test_a_container_runs_on_the_cpu_its_grading_thread_was_pinned_to(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    assert len(allowed) >= 2, "this test needs two CPUs (CI has two)"
    assert allowed == list(range(allowed[0], allowed[-1] + 1)), f"CPUs {allowed}: not consecutive"
    last = allowed[-1]
    assert _allowed_in_container(tmp_path, "pinned", {last}) == f"Cpus_allowed_list:\t{last}"
    assert _allowed_in_container(tmp_path, "unpinned", None) == f"Cpus_allowed_list:\t{_cpu_list(allowed)}"


@pytest.mark.slow
@pytest.mark.docker(BASE_IMAGE)
@pytest.mark.usefixtures("docker_engine")
def test_a_cpuset_the_engine_cannot_give_runs_the_container_on_any_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    missing = str(max(os.cpu_count() or 1, 64) + 1)  # a CPU this machine does not have: the real engine refuses it
    monkeypatch.setattr(container_module, "container_cpuset", lambda: missing)
    with caplog.at_level(logging.WARNING, logger=container_module.__name__):
        line = _allowed_in_container(tmp_path, "refused", None)
    assert line == f"Cpus_allowed_list:\t{_cpu_list(sorted(os.sched_getaffinity(0)))}"
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [f"the engine cannot run the container on CPUs {missing}"]
