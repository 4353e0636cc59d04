"""A folder benchmark without a sample split is served, with its sample track off.

The competition file's ``sample_split`` is optional. Before, its absence fell back to the benchmark's
``dev`` even where no task has a ``dev`` split, and `grader serve` refused to start ("task 'synth' has no
split 'dev'"). Now, absent, it is the benchmark's sample split when every task has it, else none: the
server starts, ``GET /api/v1/competition`` says ``"sample_split": null``, a hidden-split submission is
queued, and a sample run is refused with one line, by `grader submit --sample` before it sends a byte
and by the server (403) on the upload's headers.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from grader.data.task import Document, Query
from grader.data.writers import write_task
from grader.hosting.config import load_competition
from grader.hosting.participant.client import HostingClient
from grader.hosting.results.pins import grading_splits
from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
NO_SAMPLE = "this competition has no sample split: --sample runs are off"


def _test_split_only(root: Path) -> Path:
    """A folder benchmark (no benchmark.json) of one task, "synth", judged on ``test`` alone."""
    corpus = [Document(f"d{n}", "", f"def f{n}(x): return x + {n}") for n in range(20)]
    queries = [Query(f"q{n}", f"add {n} to x") for n in range(4)]
    write_task(root / "synth", corpus, queries, {"test": {f"q{n}": {f"d{n}": 1} for n in range(4)}})
    return root


def test_without_a_sample_split_the_server_starts_and_sample_runs_are_refused_in_one_line(tmp_path: Path) -> None:
    benchmark = _test_split_only(tmp_path / "bench")
    competition = write_competition(tmp_path / "c.toml", benchmark=str(benchmark), sample_split=None)
    assert grading_splits(load_competition(competition))[2:] == ("test", None)
    server = Server(competition, tmp_path / "state", workers=0).start()
    try:
        token = admin(server.state, "add-participant", "alice").strip()
        info = httpx.get(f"{server.url}/api/v1/competition").json()
        assert (info["split"], info["sample_split"], info["tasks"]) == ("test", None, ["synth"])
        assert list(info["pin"]["digests"]["tasks"]["synth"]) == ["test"]  # the pin holds the splits graded, no other

        local = grader_cli("submit", str(EXAMPLE), "--sample", "--server", server.url, env={"GRADER_TOKEN": token})
        assert local.returncode == 4 and NO_SAMPLE in local.stderr, local.stderr
        raw = httpx.post(
            f"{server.url}/api/v1/submissions",
            params={"sample": "true"},
            content=b"not read",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"},
        )
        assert raw.status_code == 403 and NO_SAMPLE in raw.json()["detail"], raw.text

        hidden = HostingClient(server.url, token).submit(EXAMPLE)
        assert (hidden["split"], hidden["track"]) == ("test", "hidden")  # the hidden track is served
    finally:
        server.stop()
