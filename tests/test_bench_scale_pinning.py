"""bench/scale_corpus.py: its clock starts, and ``--pin`` pins, only once every local worker of a real `grader serve` is up.

The server starts its local workers after it has exported their data copy; the script once pinned the workers it found
as soon as the copy was written, often none, and its "pinned" grades ran unpinned (bench/results/scale_corpus.md,
"seventh pass"). These tests hold the two helpers it now uses to the server's real log and process tree.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.hosting.support import Server, write_competition

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "scale_corpus.py"


@pytest.fixture(scope="module")
def scale_corpus() -> ModuleType:
    """bench/scale_corpus.py, imported as its sibling scripts import it (bench/ is not a package)."""
    if str(SCRIPT.parent) not in sys.path:
        sys.path.append(str(SCRIPT.parent))  # last: a bench script never shadows another module
    return importlib.import_module(SCRIPT.stem)


@pytest.mark.slow
def test_the_script_waits_until_every_local_worker_is_up_then_pins_each_to_a_cpu_of_its_own(tmp_path: Path, scale_corpus: ModuleType) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=2).start()
    try:
        assert server.process is not None
        scale_corpus.wait_workers_bound(server.log, 2, timeout_s=120)
        workers = sorted(pid for pid, role in scale_corpus.descendants(server.process.pid).items() if role == "worker")
        assert len(workers) == 2  # both started once both bound their fingerprints (the server's own log line)
        scale_corpus.pin_workers(server.process.pid, 2)
        cpus = os.cpu_count() or 1
        assert [os.sched_getaffinity(pid) for pid in workers] == [{0}, {1 % cpus}]
    finally:
        server.stop()


def test_pinning_stops_unless_it_finds_every_worker(scale_corpus: ModuleType) -> None:
    with pytest.raises(SystemExit, match="found 0 local worker"):
        scale_corpus.pin_workers(os.getpid(), 1)  # this process starts no `grader worker`


def test_the_wait_for_the_workers_gives_up_with_their_count(tmp_path: Path, scale_corpus: ModuleType) -> None:
    log = tmp_path / "server.log"
    log.write_text("2026-12-05 09:20:38,878 grader.hosting.fingerprints INFO worker local-2: fingerprint 571c3161d23a bound\n")
    scale_corpus.wait_workers_bound(log, 1, timeout_s=0.1)  # one bound: enough for one worker
    with pytest.raises(SystemExit, match="1 of 2 local workers bound"):
        scale_corpus.wait_workers_bound(log, 2, timeout_s=0.2)
