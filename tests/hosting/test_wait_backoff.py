"""``grader submit --wait`` / ``status --wait`` look less often while nothing changes (a look costs the server a few ms
of CPU; a grade may wait in the queue for hours), and at once again when the state changes (issue 38)."""

from __future__ import annotations

from typing import Any

import click
import pytest

from grader.cli import submit_cmd
from grader.hosting.participant import client as client_module
from grader.hosting.participant.client import HostingClient

STATES = ["queued"] * 6 + ["running"] * 3 + ["scored"]


def _scripted(monkeypatch: pytest.MonkeyPatch, states: list[str]) -> list[float]:
    """The client's views follow ``states``, one per look; the waits between looks, recorded instead of slept."""
    views = iter(states)
    slept: list[float] = []
    monkeypatch.setattr(HostingClient, "status", lambda self, submission_id: {"id": submission_id, "state": next(views)})
    monkeypatch.setattr(client_module.time, "sleep", slept.append)
    return slept


def test_looks_grow_while_the_state_stays_and_start_again_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _scripted(monkeypatch, STATES)
    changes: list[str] = []
    view = HostingClient("http://127.0.0.1:9", "token").wait("s1", poll_s=0.5, max_poll_s=2.0, on_change=lambda v: changes.append(v["state"]))
    assert view["state"] == "scored" and changes == ["queued", "running", "scored"]
    # Derived by hand: 0.5, then x1.5 per unchanged look (0.75, 1.125, 1.6875), capped at 2; "running" starts at 0.5.
    assert slept == [0.5, 0.75, 1.125, 1.6875, 2.0, 2.0, 0.5, 0.75, 1.125]


def test_without_a_bound_a_library_caller_looks_at_its_own_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _scripted(monkeypatch, STATES)
    HostingClient("http://127.0.0.1:9", "token").wait("s1", poll_s=0.2)
    assert slept == [0.2] * 9


def test_the_cli_waits_with_the_growing_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, Any] = {}

    class Recording:
        def wait(self, submission_id: str, **options: Any) -> dict[str, Any]:
            asked.update(options)
            return {"id": submission_id, "state": "scored"}

    with click.Context(click.Command("status")), pytest.raises(click.exceptions.Exit) as ended:
        submit_cmd._finish(Recording(), "s1")  # type: ignore[arg-type]
    assert ended.value.exit_code == 0
    assert (asked["poll_s"], asked["max_poll_s"]) == (0.5, 2.0) == (submit_cmd.FIRST_LOOK_S, submit_cmd.MAX_LOOK_S)
