"""A report of a submission received after the end fails `grader log audit --board` (grader/cli/log_final.py), naming the
report's entry; a submission received before the end and graded after it stays accepted, as `grader admin end` allows.

The log cannot tie a report to its receipt before the reveal (each entry commits to its submission under a key of its
own); after it, every final row names its submission, and its logged report and a receipt before the end must both open
to it. The forgery is the host's: a submission added to the database after the end, with no receipt (a receipt after
the end already fails the audit), graded through the server's own result path, which logs its report.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from grader.cli.log_final import check_final_scores
from grader.hosting.api.app import create_app
from grader.hosting.services import admin as service
from grader.transparency.entries import decode_entry
from grader.transparency.errors import LogVerificationError
from tests.hosting.browser import http_server
from tests.hosting.leaderboard_world import make_world, seed
from tests.hosting.support import grader_cli
from tests.hosting.transparency_support import reader, restarted, served_entries
from tests.hosting.world import World


def _end(world: World) -> None:
    service.end_now(world.ctx.db, host_log=world.ctx.log)


def _world(tmp_path: Path, *, forged: bool) -> World:
    """Two submissions graded before the end, then mallory's best one: received before the end and graded after it
    (honest), or added by the host after the end with no receipt and graded (forged); then the reveal."""
    world = make_world(tmp_path, None, resamples=100)
    seed(world, "alice", "alice-v1", 0.55, uploaded_ago_s=500, rng_seed=1)
    seed(world, "bob", "bob-lsa", 0.45, uploaded_ago_s=300, rng_seed=3)
    if forged:
        _end(world)
        seed(world, "mallory", "after-the-end", 0.9, uploaded_ago_s=3600, rng_seed=5, receipt=False)  # backdated, too
    else:
        seed(world, "mallory", "graded-after-the-end", 0.9, uploaded_ago_s=100, rng_seed=5, while_graded=lambda: _end(world))
    service.reveal(world.ctx.db, world.ctx.log, world.state.root, world.ctx.competition)
    restarted()
    return world


def _late_report(entries: list[bytes]) -> tuple[int, int]:
    """The index of the end entry and of the first report entry after it: mallory's full report, which the final rows
    link (the public part's report follows it)."""
    kinds = [decode_entry(entry)["kind"] for entry in entries]
    end = kinds.index("end")
    return end, kinds.index("report", end)


def test_a_submission_received_before_the_end_and_graded_after_it_passes(tmp_path: Path) -> None:
    world = _world(tmp_path, forged=False)
    try:
        client = TestClient(create_app(world.ctx))
        entries = served_entries(client, world)
        end, _late = _late_report(entries)
        assert [decode_entry(entry)["kind"] for entry in entries[end - 1 : end + 1]] == ["receipt", "end"]  # mallory's receipt
        said = check_final_scores(entries, reader(client))
        assert said is not None and said.startswith("scores: ")
        late = world.by_name("graded-after-the-end").id
        assert late in {row["submission"] for row in client.get("/api/v1/leaderboard", params={"part": "public"}).json()["boards"][0]["entries"]}
    finally:
        world.ctx.db.dispose()


@pytest.fixture(scope="module")
def forged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = _world(tmp_path_factory.mktemp("late-report"), forged=True)
    yield world
    world.ctx.db.dispose()


def test_a_report_of_a_submission_added_after_the_end_is_named(forged: World) -> None:
    client = TestClient(create_app(forged.ctx))
    entries = served_entries(client, forged)
    end, late = _late_report(entries)
    with pytest.raises(LogVerificationError) as caught:
        check_final_scores(entries, reader(client))
    said = str(caught.value)
    assert said.startswith(f"entry {late}: a report after the end (entry {end}) of a submission with no receipt before it: ")
    assert forged.by_name("after-the-end").id in said and "\n" not in said


@pytest.mark.slow
def test_log_audit_board_exits_1_naming_the_report_of_a_submission_added_after_the_end(forged: World, tmp_path: Path) -> None:
    client = TestClient(create_app(forged.ctx))
    vkey = client.get("/log/key").text.strip()
    end, late = _late_report(served_entries(client, forged))
    with http_server(forged.ctx) as url:
        audit = grader_cli("log", "audit", f"{url}/log", "--log-key", vkey, "--board", env={"XDG_STATE_HOME": str(tmp_path)}, timeout=120)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert audit.stdout == ""
    assert audit.stderr.splitlines() == [
        f"error: entry {late}: a report after the end (entry {end}) of a submission with no receipt before it: "
        f"public board 'zero-shot', row of submission '{forged.by_name('after-the-end').id}'"
    ]
