"""One run at a time per ``--out`` folder.

Two runs writing one ``OUT`` could leave a ``report.json`` of one submission next
to a ``report.dsse.json`` signed for the other. A run takes an exclusive
``fcntl`` lock on ``OUT/.grader.lock`` before it writes anything there and
keeps it until it has written its report; the kernel drops the lock when the
process ends in any way (SIGKILL included), so a stale lock cannot block a
later run. The lock file names its holder (pid, host, start time) so that a
second run can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from grader import jsonio
from grader.errors import OutputLocked

LOCK_NAME = ".grader.lock"
#: Holder descriptions are a few dozen bytes; never read more than this from the file.
_HOLDER_BYTES = 4096


def _holder_text(handle_fd: int) -> str:
    try:
        raw = os.pread(handle_fd, _HOLDER_BYTES, 0)
        holder = jsonio.loads(raw)
        return f"pid {int(holder['pid'])} on {str(holder['host'])[:64]!r}, started {str(holder['started_at'])[:40]}"
    except (OSError, ValueError, KeyError, TypeError):  # jsonio.JsonError is a ValueError
        return "a process that has not yet said who it is"


@contextlib.contextmanager
def locked_out_dir(out_dir: Path) -> Iterator[Path]:
    """Hold the exclusive lock of ``out_dir`` (created if missing) for the ``with`` block.

    Raises :class:`OutputLocked` naming the holder when another process holds it;
    then nothing in ``out_dir`` has been changed (beyond creating the folder and
    the lock file if they did not exist).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputLocked(
                f"{out_dir}: another grader run is using this folder ({_holder_text(fd)})",
                hint="wait for it to finish, or choose another --out",
            ) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": datetime.now(UTC).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        # Written in place, not renamed: the lock is on this inode.
        os.pwrite(fd, (jsonio.dumps(holder) + "\n").encode("utf-8"), 0)
        try:
            yield out_dir
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the lock
