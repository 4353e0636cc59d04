"""``grader status --watch`` on a terminal (issue 34 item 2): one line redrawn in place, the final state left.

The command runs under a real pseudo-terminal (its stdout and stderr are the pty's slave, as in a person's
shell) against a real ``grader serve``; a worker speaks the protocol by hand, as a remote worker does. What
the terminal received is read from the pty's master side, byte for byte. The plain-log mode of the same
command is tested in tests/hosting/test_progress.py.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import httpx
import pytest

from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from grader.hosting.services import progress
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, wait_for, worker_headers, write_competition

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: The pty's width: wide enough that no line of this test is cut (the command cuts a line to the width less one).
COLUMNS = 400
#: What the command writes before each redraw: back to the line's start, then erase to its end.
REDRAW = "\r\x1b[K"


class Terminal:
    """A pseudo-terminal of ``COLUMNS`` columns whose master side is read into :attr:`received` by a thread."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: every process holding the slave side closed it
                return
            if not chunk:
                return
            with self._lock:
                self._chunks.append(chunk)

    def received(self) -> str:
        """Everything the terminal received so far."""
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", "replace")

    def drained(self, timeout: float = 30) -> str:
        """Everything it received, once the reader saw the last writer close the slave side."""
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "the pty was not closed by the command"
        return self.received()

    def close(self) -> None:
        for fd in (self.slave, self.master):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.mark.slow
@pytest.mark.sqlite_only
def test_the_watch_redraws_one_line_on_a_terminal_and_leaves_the_final_state(tmp_path: Path) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    terminal = Terminal()
    watch = None
    try:
        participant = admin(server.state, "add-participant", "kim").strip()
        client = HostingClient(server.url, participant)
        submission_id = client.submit(EXAMPLE)["id"]
        env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}  # the pty's size decides
        env["GRADER_TOKEN"] = participant
        command = [sys.executable, "-m", "grader", "status", submission_id, "--server", server.url, "--watch", "--every", "0.2"]
        watch = subprocess.Popen(
            command, stdin=terminal.slave, stdout=terminal.slave, stderr=terminal.slave, env=env, cwd=REPO, start_new_session=True
        )
        os.close(terminal.slave)  # the command holds the only writer: the reader ends when it exits
        terminal.slave = -1
        wait_for(lambda: progress.NO_WORKER in terminal.received(), 60, what="the waiting line")
        # a worker connects and claims it, then reports progress: each change is a redraw of the same line
        key = tmp_path / "key"
        ensure_worker_key(key)
        token = admin(server.state, "add-worker", "w1", "--public-key", str(worker_public_key_path(key))).strip()
        fingerprint = stated_fingerprint(server.url, token, ensure_worker_key(key))
        job = httpx.post(f"{server.url}/api/v1/worker/claim", json=claim_body(fingerprint, 5), headers=worker_headers(token)).json()
        assert job["submission_id"] == submission_id
        task = job["tasks"][0]
        beat = f"{server.url}/api/v1/worker/jobs/{submission_id}/heartbeat"
        sent = {"attempt": 1, "progress": [{"task": task, "phase": "encoding", "documents": 10, "encoded": 3}]}
        assert httpx.post(beat, json=sent, headers=worker_headers(token)).status_code == 200
        wait_for(lambda: f"{task}: encoding 3 of 10 documents" in terminal.received(), 60, what="the progress redrawn")
        admin(server.state, "cancel", submission_id)
        assert watch.wait(timeout=60) == 3  # cancelled: the exit status of --wait
        shown = terminal.drained()
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        terminal.close()
        server.stop()
    # The pty turns each "\n" into "\r\n". Before the watch ended, the terminal got redraws only: no new line at all.
    assert shown.startswith(REDRAW), shown[:200]
    redrawn, _, rest = shown.partition("\r\n")
    assert "\n" not in redrawn
    states = redrawn.split(REDRAW)[1:]
    assert len(states) >= 3 and len(states) == len(set(states))  # waiting, running, its progress: each change once, none per look
    assert all(0 < len(state) <= COLUMNS - 1 for state in states)
    assert f"{submission_id}  queued" in states[0] and progress.NO_WORKER in states[0]
    assert any(f"{submission_id}  running" in state and f"{task}: encoding 3 of 10 documents" in state for state in states)
    # The last redrawn state stays on the screen (the line is ended, not erased), and the final state is a line below it.
    assert not redrawn.endswith(REDRAW) and REDRAW not in rest
    assert rest.splitlines()[0].startswith(f"{submission_id}  cancelled") and rest.endswith("\r\n")
