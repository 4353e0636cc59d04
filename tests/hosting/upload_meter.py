"""What a real `grader serve` received and unpacked of its uploads, counted inside its own process.

:class:`MeteredServer` starts `grader serve` with :func:`install` run first: the intake's two costly
steps (``StateDir.receive``, writing a body to a temporary file, and the unpacking that
``check_submission`` does) are wrapped to count bodies, bytes and the peak of bytes unpacked at
once, and the counts are rewritten to ``meter.json`` beside the state folder after each change.
The server's code is otherwise the product's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from tests.hosting.support import Server

#: The counts, all zero before the first upload.
ZERO = {"received": 0, "received_bytes": 0, "unpacked": 0, "unpacked_bytes": 0, "peak_unpacked_bytes": 0}


def meter_path(state: Path) -> Path:
    return state.parent / f"{state.name}-meter.json"


def install() -> None:
    """Wrap the intake's receive and unpack steps of this process (the server's argv names its state folder)."""
    from grader.hosting import storage
    from grader.hosting.intake import upload_checks

    path = meter_path(Path(sys.argv[sys.argv.index("--state") + 1]))
    counts = dict(ZERO)
    unpacked_now = [0]
    lock = threading.Lock()

    def add(**more: int) -> None:
        with lock:
            for name, value in more.items():
                counts[name] += value
            counts["peak_unpacked_bytes"] = max(counts["peak_unpacked_bytes"], unpacked_now[0])
            path.with_suffix(".tmp").write_text(json.dumps(counts), encoding="utf-8")
            os.replace(path.with_suffix(".tmp"), path)

    receive = storage.StateDir.receive

    async def metered_receive(self: storage.StateDir, chunks: AsyncIterator[bytes], max_bytes: int) -> storage.StoredUpload:
        add(received=1)

        async def counted() -> AsyncIterator[bytes]:
            async for chunk in chunks:
                add(received_bytes=len(chunk))
                yield chunk

        return await receive(self, counted(), max_bytes)

    unpack = upload_checks.open_submission

    @contextlib.contextmanager
    def metered_unpack(upload: Any, *args: Any, **kwargs: Any) -> Iterator[Path]:
        with unpack(upload, *args, **kwargs) as folder:
            size = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink())
            with lock:
                unpacked_now[0] += size
            add(unpacked=1, unpacked_bytes=size)
            try:
                yield folder
            finally:
                with lock:
                    unpacked_now[0] -= size

    storage.StateDir.receive = metered_receive  # type: ignore[method-assign]
    upload_checks.open_submission = metered_unpack  # type: ignore[assignment]
    add()


class MeteredServer(Server):
    """`grader serve` whose intake counts what it received and unpacked (:meth:`meter`)."""

    PROGRAM = "import tests.hosting.upload_meter as m; m.install(); from grader.cli.main import main; main()"

    def meter(self) -> dict[str, int]:
        """The counts so far (since this server process started)."""
        path = meter_path(self.state)
        return dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else dict(ZERO)
