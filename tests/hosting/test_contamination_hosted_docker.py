"""The hosted contamination audit through a real `grader serve` (uvicorn subprocess, SQLite, one local Docker worker).

A submission may carry ``training.sketch`` (``grader sketch-training``) beside submission.json. The server, never
the worker, compares it with the whole hidden split of each task when it scores the grade, and only the released
figure (grader/integrity/release.py) enters the signed report and the board. The probing attack: a sketch of one
candidate hidden text must get the very figure a sketch of a text that is not in the split gets.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader.data.registry import resolve_benchmark
from grader.hosting.participant.client import HostingClient
from grader.integrity.sketch_build import build_sketch
from grader.integrity.sketch_file import SUBMISSION_SKETCH, encode
from tests.hosting.attack_support import post, stored_uploads, submissions_of, upload_of
from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = [pytest.mark.docker(RUNNER_IMAGE), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: Long test queries of text2code planted in the "contaminated" sketch: 25 of them, a step of 10 (881 test
#: queries: max(10, ceil(881 / 100))), so the released figure is 20 whatever few near-copies of them the split holds.
PLANTED = 25
NON_MEMBER = "a ledger of lighthouse keepers who logged the weather every night for forty years on a rocky northern island"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    require_docker([RUNNER_IMAGE])
    root = tmp_path_factory.mktemp("hosted-audit")
    # three workers: the three sketched submissions grade side by side (the lane's time budget)
    server = Server(write_competition(root / "c.toml", tables={"quotas": {"concurrent": 3}}), root / "state", workers=3).start()
    server.tokens = {name: admin(server.state, "add-participant", name).strip() for name in ("planted", "member", "outsider", "broken")}  # type: ignore[attr-defined]
    server.root = root  # type: ignore[attr-defined]
    yield server
    server.stop()


@pytest.fixture(scope="module")
def graded(served: Server) -> dict[str, str]:
    """The three sketched submissions, uploaded together and graded: participant name to submission id.

    ``planted``: 25 long text2code test queries; ``member``: the next one alone (a probe of one candidate hidden
    text); ``outsider``: one text that is in no split.
    """
    root: Path = served.root  # type: ignore[attr-defined]
    texts = long_test_queries()
    sketched = {"planted": texts[:PLANTED], "member": [texts[PLANTED]], "outsider": [NON_MEMBER]}
    ids = {who: submit(served, with_sketch(root, who, sketch), who) for who, sketch in sketched.items()}
    for who, sid in ids.items():
        view = HostingClient(served.url, served.tokens[who]).wait(sid, timeout_s=300)  # type: ignore[attr-defined]
        assert view["state"] == "scored", view
    return ids


def long_test_queries() -> list[str]:
    """text2code's test-query texts of 25 words or more (long enough to be audited), in file order."""
    task = resolve_benchmark("mini").task("text2code")
    judged = task.qrels("test")
    return [entry.text for entry in task.iter_queries() if entry.id in judged and len(entry.text.split()) >= 25]


def with_sketch(root: Path, name: str, texts: list[str]) -> Path:
    """The example ONNX submission, renamed, carrying a sketch of ``texts`` at training.sketch."""
    folder = root / name
    shutil.copytree(EXAMPLE, folder)
    manifest = json.loads((folder / "submission.json").read_text())
    manifest["name"] = name
    (folder / "submission.json").write_text(json.dumps(manifest))
    (folder / SUBMISSION_SKETCH).write_bytes(encode(build_sketch(texts)))
    return folder


def signed_report(server: Server, submission_id: str, token: str, out: Path) -> dict[str, Any]:
    """The signed report a participant downloads (the public part's, before the end), verified with the host key."""
    key = out.parent / "host.pub"
    key.write_bytes(httpx.get(f"{server.url}/host-key.pub", timeout=30).content)
    got = grader_cli("status", submission_id, "--report", str(out), "--server", server.url, env={"GRADER_TOKEN": token})
    assert got.returncode == 0, got.stderr
    verified = grader_cli("verify", str(out), "--key", str(key), "--json")
    assert verified.returncode == 0, verified.stderr
    report: dict[str, Any] = json.loads(verified.stdout)
    return report


def submit(server: Server, folder: Path, who: str) -> str:
    done = grader_cli("submit", str(folder), "--server", server.url, env={"GRADER_TOKEN": server.tokens[who]})  # type: ignore[attr-defined]
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()[0]


def board_rows(server: Server) -> dict[str, dict[str, Any]]:
    boards = httpx.get(f"{server.url}/api/v1/leaderboard", timeout=30).json()["boards"]
    return {entry["participant"]: entry for board in boards for entry in board["entries"]}


def test_a_malformed_sketch_is_refused_422_with_one_line_and_nothing_is_stored(served: Server) -> None:
    token = served.tokens["broken"]  # type: ignore[attr-defined]
    before = stored_uploads(served)
    sketch = bytearray(encode(build_sketch([NON_MEMBER])))
    sketch[-1] ^= 1  # its digest no longer matches
    response = post(served, token, upload_of(members=[(SUBMISSION_SKETCH, bytes(sketch))]))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail == "invalid submission: training.sketch: sha256: the digest does not match the file's contents (truncated or altered)"
    assert stored_uploads(served) == before and submissions_of(served, "broken") == []


def test_planted_copies_get_the_released_figure_in_the_signed_report_and_on_the_board(served: Server, graded: dict[str, str], tmp_path: Path) -> None:
    root: Path = served.root  # type: ignore[attr-defined]
    report = signed_report(served, graded["planted"], served.tokens["planted"], tmp_path / "planted.dsse.json")  # type: ignore[attr-defined]
    block = report["contamination"]
    figures = {entry["task"]: entry for entry in block["tasks"]}
    assert sorted(figures) == sorted(resolve_benchmark("mini").spec.tasks)  # every task, each over its whole split
    assert figures["text2code"] == {"task": "text2code", "split": "test", "test_queries": 881, "step": 10, "touched": 20, "share": round(20 / 881, 4)}
    assert block["sketch_sha256"] == hashlib.sha256((root / "planted" / SUBMISSION_SKETCH).read_bytes()).hexdigest()
    row = board_rows(served)["planted"]
    assert "text2code (test): at least 20 of 881 test queries touched" in row["contamination"]
    page = httpx.get(f"{served.url}/", timeout=30).text
    assert "Contamination" in page and "at least 20 of 881 test queries touched" in page
    # the CSV export carries the same figure, in its column before the cost one (the last)
    exported = list(csv.DictReader(io.StringIO(httpx.get(f"{served.url}/leaderboard.csv", timeout=30).text)))
    assert list(exported[0])[-2:] == ["contamination", "cpu_s_per_1000_queries"]
    assert {r["participant"]: r["contamination"] for r in exported}["planted"] == row["contamination"]
    # the sketch was kept on the server, apart from the upload the worker reads
    assert (served.state / "uploads" / f"{graded['planted']}.sketch").read_bytes() == (root / "planted" / SUBMISSION_SKETCH).read_bytes()
    # a re-scoring of the stored runs audits the kept sketch again: the same released figures, in the new signed report
    out = admin(served.state, "rejudge", "--rescore", graded["planted"], "--competition", str(root / "c.toml"))
    assert "re-scored 1 submission(s)" in out, out
    admin(served.state, "report", graded["planted"], "--out", str(tmp_path / "rescored.dsse.json"))
    verified = grader_cli("verify", str(tmp_path / "rescored.dsse.json"), "--key", str(tmp_path / "host.pub"), "--json")
    assert verified.returncode == 0, verified.stderr
    rescored = json.loads(verified.stdout)
    assert "rescored" in rescored["labels"] and rescored["contamination"] == block


def test_probing_one_hidden_text_gets_the_same_withheld_figure_as_a_non_member(served: Server, graded: dict[str, str], tmp_path: Path) -> None:
    got = {
        who: signed_report(served, graded[who], served.tokens[who], tmp_path / f"{who}.dsse.json")["contamination"]  # type: ignore[attr-defined]
        for who in ("member", "outsider")
    }
    assert got["member"]["sketch_sha256"] != got["outsider"]["sketch_sha256"]  # two different sketches ...
    assert got["member"]["tasks"] == got["outsider"]["tasks"]  # ... one released figure: membership is not told
    assert all(entry["touched"] is None and entry["share"] is None for entry in got["member"]["tasks"])  # withheld below the step
    rows = board_rows(served)
    assert rows["member"]["contamination"] == rows["outsider"]["contamination"]
    assert "text2code (test): fewer than 10 of 881 test queries touched (withheld below 10)" in rows["member"]["contamination"]
