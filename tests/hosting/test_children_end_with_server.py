"""A stopped or killed ``grader serve`` leaves none of its processes behind: its scoring processes
(grader/grading/score_process.py) and the multiprocessing resource tracker end with it, after a SIGTERM and after a
SIGKILL too, when no clean-up runs (each scoring process watches its parent; the tracker ends when the last holder of
its pipe does)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.hosting.support import Server, wait_for, write_competition


class ScoringServer(Server):
    """A real ``grader serve`` whose scoring pool is started before it serves, as the first scored result starts it."""

    PROGRAM = (
        "import os; from grader.grading import score_process; "
        "assert score_process._current_pool().submit(os.getpid).result(timeout=120) != os.getpid(); "
        "from grader.cli.main import main; main()"
    )


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (read from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie is dead, waiting for its (new) parent to reap it


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_the_scoring_processes_and_the_resource_tracker_end_with_the_server(tmp_path: Path, stop: signal.Signals) -> None:
    server = ScoringServer(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    children: set[int] = set()
    try:
        assert server.process is not None
        children = _children(server.process.pid)
        commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid in children}
        assert any(b"resource_tracker" in line for line in commands.values()), commands
        assert any(b"spawn_main" in line and b"resource_tracker" not in line for line in commands.values()), commands
        os.kill(server.process.pid, stop)
        server.process.wait(20)
        started = time.monotonic()
        wait_for(lambda: not any(_alive(pid) for pid in children), timeout=10, what=f"the server's children {sorted(children)} to end")
        assert time.monotonic() - started < 5
    finally:
        server.stop()
        for pid in children:  # what this test's server started, should it have outlived the test's wait
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
