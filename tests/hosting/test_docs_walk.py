"""The host's and the participant's path, typed as docs/hosting.md and README.md write them.

Docs that no test types go stale: a test walks the host, participant and operator paths as the docs write them.
The three paths and where each is walked:

* host and participant: docs/hosting.md's sessions ("From zero, on one machine"), then README.md's
  ``grader check --competition FILE``. Each ``$`` line of their ``<!-- test -->`` transcripts is typed into one
  bash session (tests/doc_walk_support.py), in order, with the real CLI of this checkout: the host copies the
  example competition, starts one real ``grader serve`` (one local worker grading in the Docker sandbox) and
  adds a participant; the participant checks ``submissions_example/onnx-lsa`` against the server's
  competition, submits it (hidden and sample), follows it, lists submissions, quota and final choices and
  saves the public part's report; the host reads the history, ends the competition (the server logs the reveal by
  itself: anyone's `grader log audit` finds it), reads the private board;
  anyone fetches the host key and runs ``grader reveal-check``; the participant saves the full report and
  ``grader verify`` checks it; then a standing board over public data beside the others, whose listed number anyone
  checks against the log (``grader log audit --board``); then a competition in two phases (the final one refused before
  it opens, an upload to the open one); then a competition of open sign-up, teams and notifications (a person signs
  up with the page's form, makes a team another joins with its code, sets a webhook to ``grader notify listen`` and
  hears of their submission's grade, signed); then the ended competition moved to a second server (retired, exported,
  imported into a second state folder, served there: its log audits with ``--board`` and alice's token opens it).
  Every command must exit 0 and print the lines the page shows (ids, numbers and
  dates may differ; an id the page shows is carried to the later commands that use it). The one server
  serves the whole module.
* operator (PostgreSQL, Redis, a server and two remote workers from a bare machine): docs/deploy.md,
  walked by tests/hosting/test_deploy_doc.py with the same block markers.

The pack step of the participant's path (docs/pack.md, README.md) needs torch and a model; its blocks say
so and name tests/test_pack_model.py, which packs a real one. Every shell block of README.md, docs/pack.md and
docs/hosting.md is marked ``<!-- test -->`` or ``<!-- not tested here: why -->``; an unmarked one fails here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import doc_walk_support as doc_walk
from tests.doc_walk_support import Command, Session
from tests.hosting.support import REPO, free_port
from tests.sandbox_support import RUNNER_IMAGE, require_docker

HOSTING = REPO / "docs" / "hosting.md"
README = REPO / "README.md"
PACK = REPO / "docs" / "pack.md"
WALKED = (HOSTING, README)  # in this order: README's check needs no server
#: Settings of the machine the test runs on that the walk must not see (it sets what the pages set).
HOSTING_VARIABLES = (
    "GRADER_SERVER",
    "GRADER_TOKEN",
    "GRADER_STATE",
    "GRADER_DATABASE",
    "GRADER_BROKER",
    "GRADER_COMPETITION",
    "GRADER_WORKER_TOKEN",
    "GRADER_WORKER_KEY_DIR",
    "GRADER_WORKER_DATA",
    "GRADER_HOST_KEY_PASSPHRASE",
)


def test_every_shell_block_of_the_walked_pages_is_marked_tested_or_says_why_not() -> None:
    missing = [where for page in (README, PACK, HOSTING) for where in doc_walk.unmarked(page, REPO)]
    assert not missing, f"shell blocks without <!-- test --> or <!-- not tested here: why -->: {missing}"
    tested = [b for page in WALKED for b in doc_walk.shell_blocks(page) if b.marker == doc_walk.TESTED]
    assert all(b.lang == "console" for b in tested), "a walked block is a console transcript ($ lines and their output)"
    assert len(tested) >= 5


def test_an_unnamed_fence_with_a_prompt_is_a_shell_block_and_a_transcript_parses() -> None:
    page = "<!-- test -->\n```console\n$ echo a \\\n  b\na b\n\n$ true\n```\n\n```\n$ grader check x\n```\n\n```\nplain text\n```\n"
    found = doc_walk.blocks(page)
    assert [(b.shell, b.marker) for b in found] == [(True, "<!-- test -->"), (True, None), (False, None)]
    assert doc_walk.commands(found[0], "p.md") == [Command("p.md", 3, "echo a \\\n  b", ("a b",)), Command("p.md", 7, "true", ())]


def test_shown_output_matches_loosely_and_binds_the_ids_it_shows() -> None:
    shown = Command("p.md", 1, "grader submissions", ("sdb1696df80d569c1  scored  public score 0.4532", "…", "done in /…/state"))
    bound = doc_walk.check_output(shown, "s0123456789abcdef   scored  public score 0.1\nother\nline\ndone in /tmp/x/state\n", {})
    assert bound == {"sdb1696df80d569c1": "s0123456789abcdef"}
    with pytest.raises(AssertionError, match="printed no line like"):
        doc_walk.check_output(shown, "s0123456789abcdef  failed  public score 0.1\nx\ndone in /tmp/x/state\n", {})
    with pytest.raises(AssertionError, match="shown for"):  # one shown id, two real submissions
        doc_walk.check_output(shown, "s1111111111111111  scored  public score 0.1\nx\ndone in /s/state\n", bound)


# -- the walk ---------------------------------------------------------------------------------------------------


@dataclass
class Walk:
    home: Path
    session: Session
    server: str
    #: each command typed, with what it printed
    typed: list[tuple[Command, str]]
    #: the second server, where mini-demo moved
    moved: str

    def output(self, starts: str) -> str:
        """What the last command whose text starts so printed."""
        return next(out for cmd, out in reversed(self.typed) if cmd.text.startswith(starts))

    def output_of(self, text: str) -> str:
        """What the last command typed exactly so printed."""
        return next(out for cmd, out in reversed(self.typed) if cmd.text == text)


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    require_docker([RUNNER_IMAGE])
    home = tmp_path_factory.mktemp("walk")
    for folder in ("competitions_example", "submissions_example"):  # the checkout's root, as the pages assume
        (home / folder).symlink_to(REPO / folder)
    port, moved = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in HOSTING_VARIABLES}
    env |= {
        "PATH": f"{doc_walk.grader_on_path(tmp_path_factory.mktemp('bin') / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        # what docs/hosting.md's untested block exports, with a free port
        "PORT": str(port),
        "GRADER_SERVER": f"http://127.0.0.1:{port}",
        # the port of the participant's webhook receiver (`grader notify listen`), which the page exports as well
        "HOOK_PORT": str(free_port()),
        # the second server "Moving a competition to another server" starts
        "NEW_PORT": str(moved),
        "NEW_SERVER": f"http://127.0.0.1:{moved}",
        # `grader log audit` saves the checkpoints it saw here, not in the home of whoever runs the tests
        "XDG_STATE_HOME": str(home / "xdg-state"),
    }
    session = Session(env=env, cwd=home, log=home / "walk.log")
    typed: list[tuple[Command, str]] = []
    try:
        for page in WALKED:
            name = str(page.relative_to(REPO))
            for block in doc_walk.shell_blocks(page):
                if block.marker == doc_walk.TESTED:
                    typed += [(cmd, session.run(cmd)) for cmd in doc_walk.commands(block, name)]
        yield Walk(home, session, env["GRADER_SERVER"], typed, env["NEW_SERVER"])
    finally:
        session.close()


def _scores(line: str) -> dict[str, str]:
    return dict(re.findall(r"(public|private|full|sample) score (\d\.\d{4})", line))


@pytest.mark.slow
def test_the_pages_run_as_written_and_background_commands_print_what_they_show(walk: Walk) -> None:
    assert len(walk.typed) >= 20
    log = walk.session.log.read_text(encoding="utf-8", errors="replace")
    for cmd, _ in walk.typed:
        if cmd.text.rstrip().endswith("&"):  # its output arrives anywhere in the session
            doc_walk.check_output(cmd, log, walk.session.ids)
    assert "Traceback" not in log


@pytest.mark.slow
def test_the_host_path(walk: Walk) -> None:
    log = walk.session.log.read_text(encoding="utf-8", errors="replace")
    start = next(line for line in log.splitlines() if line.startswith("serving competition"))
    assert f"state in {walk.home / 'state'}" in start and start.endswith(
        "local workers: 1 (their logs: " + f"{walk.home / 'state' / 'run' / 'local-N.log'})"
    )
    assert (walk.home / "alice.token").read_text(encoding="ascii").startswith("gp_")
    # after the end, the competition's page leads with the final standings and says how to check the reveal; after the
    # upgrade, it is at /c/mini-demo/; after the move, on the second server (retired on the first: / lists it no more)
    page = httpx.get(walk.moved + "/c/mini-demo/", timeout=30).text
    assert 'id="ended"' in page and "reveal-check" in page
    assert httpx.get(walk.server + "/c/mini-demo/", timeout=30).status_code == 404
    listed = {c["name"]: c["status"] for c in httpx.get(walk.server + "/api/v1/competitions", timeout=30).json()}
    assert listed == {"mini-cup": "open", "mini-board": "standing", "mini-phases": "open", "mini-open": "open"}
    assert {c["name"]: c["status"] for c in httpx.get(walk.moved + "/api/v1/competitions", timeout=30).json()} == {"mini-demo": "ended"}
    # the moved competition: the same log (its reveal included) and final boards, alice's token opening it
    moved = walk.output('grader log audit "${NEW_SERVER}/c/mini-demo/log"')
    assert "reveal: checked against entry 0" in moved and "board: the final public and private boards are the ones the reveal logged" in moved
    # the competition of phases: the open one named, and its board the default one
    phases = httpx.get(walk.server + "/c/mini-phases/api/v1/competition", timeout=30).json()
    assert phases["phase"] == "development" and [p["name"] for p in phases["phases"]] == ["development", "final"]
    assert "full leaderboard, phase development" in httpx.get(walk.server + "/c/mini-phases/", timeout=30).text
    assert httpx.get(walk.server + "/c/mini-phases/api/v1/leaderboard", params={"phase": "final"}, timeout=30).json()["boards"] == []
    assert httpx.get(walk.server + "/me", timeout=30).status_code == 404
    assert not (walk.home / "state" / "grader.sqlite3").exists() and (walk.home / "state" / "competitions" / "mini-demo" / "grader.sqlite3").is_file()
    # the end led to the reveal by itself: the log holds it, and no `grader admin log-reveal` was typed
    assert "reveal: checked against entry 0" in walk.output('grader log audit "${GRADER_SERVER}/log"')
    assert not any("log-reveal" in cmd.text for cmd, _ in walk.typed)
    history = walk.output("grader admin --state state/ history")
    assert "worker local-1: attempt 1 claimed" in history and "running -> scored" in history


@pytest.mark.slow
def test_the_participant_path_scores_agree_everywhere(walk: Walk) -> None:
    hidden = walk.session.ids["sdb1696df80d569c1"]
    submitted = _scores(walk.output("grader submit submissions_example/onnx-lsa --wait").splitlines()[-1])
    listed = _scores(next(line for line in walk.output_of("grader submissions").splitlines() if line.startswith(hidden)))
    after = _scores(walk.output("grader status sdb1696df80d569c1 --report r.json").splitlines()[-1])
    assert submitted == listed == {"public": after["public"]}
    assert set(after) == {"public", "private", "full"}
    # the private score the server shows is the one anyone re-derives from the signed report
    assert f"{hidden} (fine-tuned): private score {after['private']} re-derived" in walk.output("grader reveal-check")
    # the full score is the signed full report's aggregate, which grader verify read
    verified = re.search(r"score: NDCG@10 = (\S+)", walk.output("grader verify r.json"))
    assert verified and f"{float(verified.group(1)):.4f}" == after["full"]
    assert "1 of 5 in the last 24 h; 1 of 50 in total" in walk.output_of("grader quota")  # one hidden upload, charged once
    # after the upgrade, the same submission at its competition's address, the same scores
    moved = _scores(walk.output("grader status sdb1696df80d569c1 --server").splitlines()[-1])
    assert moved == after
    # the standing board over public data: every score at once, and its board's number is the full score
    standing = _scores(walk.output('grader submit submissions_example/onnx-lsa --server "${GRADER_SERVER}/c/mini-board"').splitlines()[-1])
    assert set(standing) == {"public", "private", "full"}
    board = httpx.get(walk.server + "/c/mini-board/api/v1/leaderboard", timeout=30).json()
    assert board["part"] == "full" and f"{board['boards'][0]['entries'][0]['score']:.4f}" == standing["full"]


@pytest.mark.slow
def test_the_participant_signs_up_teams_up_and_hears_of_the_grade(walk: Walk) -> None:
    bob = (walk.home / "bob.token").read_text(encoding="ascii").strip()
    assert bob.startswith("gp_")  # the sign-up page showed a token, and it opens the competition
    team = httpx.get(walk.server + "/c/mini-open/api/v1/team", headers={"Authorization": f"Bearer {bob}"}, timeout=30).json()
    assert team["name"] == "lsa-duo" and sorted(team["members"]) == ["alice", "bob"]
    # the submission's line, wherever the receiver's own line (printed in the background) fell among the output's lines
    submitted = walk.output('grader submit submissions_example/onnx-lsa --server "${OPEN}"')
    uploaded = re.findall(r"^(s[0-9a-f]{16})  scored", submitted, re.M)[-1]
    # the receiver verified the server's signature over the delivery of bob's grade, under the secret written 0600
    assert (walk.home / "hook.secret").stat().st_mode & 0o777 == 0o600
    log = walk.session.log.read_text(encoding="utf-8", errors="replace")
    assert f"competition mini-open  {uploaded} running -> scored  (signature verified)" in log
    assert "refused: Grader-Signature" not in log and "refused: no secret" not in log
    # alice, a member, reads the team's submission bob made
    assert walk.output('grader submissions --server "${OPEN}"').startswith(f"{uploaded}  scored")
