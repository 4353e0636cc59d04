"""Standing leaderboards (docs/hosting.md#standing-leaderboards): a competition file without ``end``.

Nothing ends or reveals a standing board by itself: the reaper passes, the window stays open, the log holds no ``end``
and no ``reveal``. Over public test data (``test_data = "public"``) every number is disclosed from the start: the
participant's full report, private and full scores, the private board, and each board entry's full signed report to
anyone, without a token; the Ladder cannot be set. Over hidden data the Ladder is the default. The host may still end
one (``grader admin end``): that end stays, across a restart with the file that names none.

Against a real ``grader serve``: the public board grades onnx-lsa in the Docker sandbox (one grade); the hidden one
needs no grade. The rules of the file and the disclosure rule: the unit tests at the end.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from grader.hosting.clock import utcnow
from grader.hosting.config import load_competition
from grader.hosting.errors import CompetitionFileError
from grader.hosting.intake.refusals import window_refusal
from grader.hosting.participant.client import HostingClient
from grader.hosting.visibility import Download, Part, board_visible, default_part, disclosed, report_download
from grader.reports.keys import load_public_key
from grader.reports.verify import verify_envelope
from tests.hosting.support import REPO, Server, admin, grader_cli, wait_for, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

BASE = 'name = "c"\nbenchmark = "mini"\nstart = 2026-01-01T00:00:00Z\n'


def _kinds(server: Server) -> list[str]:
    """The kinds of the entries the server's log holds, in order."""
    with sqlite3.connect(server.state / "grader.sqlite3") as connection:
        rows = connection.execute("SELECT kind FROM log_entries ORDER BY idx").fetchall()
    connection.close()
    return [str(row[0]) for row in rows]


@pytest.mark.slow
def test_a_standing_board_over_public_data_publishes_every_number_and_never_ends(tmp_path: Path) -> None:
    require_docker([RUNNER_IMAGE])
    file = write_competition(tmp_path / "c.toml", name="board", end=None, test_data="public")
    server = Server(file, tmp_path / "state", workers=1).start()
    try:
        token = admin(server.state, "add-participant", "kim").strip()
        client = HostingClient(server.url, token)
        assert client.competition()["end"] is None
        sid = client.submit(REPO / "submissions_example" / "onnx-lsa")["id"]
        view = client.wait(sid, timeout_s=240)
        assert view["state"] == "scored"
        # disclosed at once: the participant's private and full scores, and the full report (not the public part's)
        assert {"score", "private_score", "full_score"} <= set(view), view
        anyone = httpx.Client(base_url=server.url, timeout=30)
        private = anyone.get("/api/v1/leaderboard", params={"part": "private"})
        assert private.status_code == 200 and [e["submission"] for b in private.json()["boards"] for e in b["entries"]] == [sid]
        # the board a reader gets is the full one: every query of the public test split, each row linking its full report
        board = anyone.get("/api/v1/leaderboard").json()
        entry = next(e for b in board["boards"] for e in b["entries"])
        assert board["part"] == "full" and entry["ladder"] is False and entry["score"] == view["full_score"]
        envelope = anyone.get(entry["report"])  # no token: a reader checks a listed number
        assert envelope.status_code == 200
        report = verify_envelope(envelope.content, load_public_key(server.state / "keys" / "grader.pub")).report
        assert "part" not in report["labels"]  # the full report, every query of the graded split (not the public part's)
        assert all("per_query" in task for task in report["tasks"].values())
        assert round(report["aggregate"]["score"], 4) == entry["score"]
        # and so does anyone's audit: every row's numbers are its logged report's
        vkey = anyone.get("/log/key").text.strip()
        audit = grader_cli(
            "log", "audit", f"{server.url}/log", "--log-key", vkey, "--board", env={"XDG_STATE_HOME": str(tmp_path / "auditor")}, timeout=120
        )
        assert audit.returncode == 0 and "board: 1 row(s) show the score and task means of their logged report" in audit.stdout, (
            audit.stdout + audit.stderr
        )
        time.sleep(1.5)
        kinds = _kinds(server)
        assert "receipt" in kinds and "report" in kinds and "end" not in kinds and "reveal" not in kinds, kinds
        assert "Scores over every query of the public test split" in anyone.get("/").text
        anyone.close()
    finally:
        server.stop()


@pytest.mark.slow
def test_a_standing_board_over_hidden_data_stays_open_until_the_host_ends_it_and_that_end_stays(tmp_path: Path) -> None:
    file = write_competition(tmp_path / "c.toml", name="hidden-board", end=None)
    server = Server(file, tmp_path / "state", workers=0).start()
    try:
        token = admin(server.state, "add-participant", "kim").strip()
        client = HostingClient(server.url, token)
        sid = client.submit(REPO / "submissions_example" / "onnx-lsa")["id"]
        time.sleep(1.5)  # reaper passes: nothing ends it
        assert "end" not in _kinds(server)
        for part in ("private", "full"):  # nothing disclosed
            assert httpx.get(f"{server.url}/api/v1/leaderboard", params={"part": part}).status_code == 404
        assert "a standing leaderboard: it has no end" in httpx.get(f"{server.url}/").text
        # the host may end it; the reveal still waits for the grade in flight (queued here), then follows by itself
        admin(server.state, "end", "--yes")
        time.sleep(1.0)
        assert "end" in _kinds(server) and "reveal" not in _kinds(server)
        admin(server.state, "cancel", sid)
        wait_for(lambda: "reveal" in _kinds(server), timeout=30, what="the reveal after the host's end")
        server.stop()
        # the same file, naming no end, after a restart: the end stays, uploads are refused
        server.start()
        assert HostingClient(server.url, token).competition()["end"] is not None
        refused = httpx.post(f"{server.url}/api/v1/submissions", headers={"Authorization": f"Bearer {token}", "Content-Length": "1"}, content=b"x")
        assert refused.status_code == 403 and "closed" in refused.text
    finally:
        server.stop()


# -- the file's rules and the disclosure rule (no server) --------------------------------------------------------------


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return load_competition(path)


def test_a_file_without_end_is_a_standing_board_and_its_defaults_follow_its_data(tmp_path: Path) -> None:
    hidden = _load(tmp_path, BASE)
    assert hidden.standing and hidden.end is None and not hidden.public_data
    assert hidden.leaderboard.ladder  # hidden data probed for ever: a Ladder unless the file says otherwise
    assert not _load(tmp_path, BASE + "[leaderboard]\nladder = false\n").leaderboard.ladder
    public = _load(tmp_path, BASE + 'test_data = "public"\n')
    assert public.standing and public.public_data and not public.leaderboard.ladder
    ended = _load(tmp_path, BASE + "end = 2027-01-01T00:00:00Z\n")
    assert not ended.standing and not ended.leaderboard.ladder  # an old file: as before
    with pytest.raises(CompetitionFileError) as caught:
        _load(tmp_path, BASE + 'test_data = "public"\n[leaderboard]\nladder = true\n')
    assert str(caught.value).startswith(f"{tmp_path / 'c.toml'}: leaderboard.ladder: must be false")
    with pytest.raises(CompetitionFileError, match="test_data"):
        _load(tmp_path, BASE + 'test_data = "secret"\n')


def test_public_data_discloses_every_number_from_the_start_and_no_end_never_closes() -> None:
    now = utcnow()
    assert window_refusal(now.replace(year=2020), None, now) is None
    assert disclosed(ended=False, public_data=True) and not disclosed(ended=False, public_data=False)
    ended = disclosed(ended=False, public_data=True)
    assert board_visible(Part.PRIVATE, ended=ended)
    assert report_download(track="hidden", result_state="scored", ended=ended, ladder=False) is Download.FULL
    assert report_download(track="hidden", result_state="scored", ended=False, ladder=False) is Download.PUBLIC_PART
    # the full board: over public data only, and the one a reader gets there; over hidden data it would leak the private part
    assert board_visible(Part.FULL, ended=True, public_data=True) and not board_visible(Part.FULL, ended=True, public_data=False)
    assert default_part(ended=False, public_data=True) is Part.FULL
    assert default_part(ended=False, public_data=False) is Part.PUBLIC and default_part(ended=True, public_data=False) is Part.PRIVATE
