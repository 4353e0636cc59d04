"""The submission state machine as data: the table, its events, its one move(), the database's CHECK, the generated diagram."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.exc import IntegrityError, StatementError

from grader.errors import InternalError
from grader.hosting.db.models import Submission, Transition
from grader.hosting.queue import lifecycle
from grader.hosting.states import EVENTS, REJUDGE, TERMINAL, TRANSITIONS, State, Track, allowed, event_of, render_diagram, with_diagram
from tests.hosting.world import World, new_submission, state_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "hosting.md"
EVERY_PAIR = list(itertools.product(State, State))


def test_every_state_has_a_row_and_every_edge_exactly_one_event() -> None:
    assert set(TRANSITIONS) == set(State)
    table = {(source, target) for source, targets in TRANSITIONS.items() for target in targets}
    by_events = [edge for event in EVENTS for edge in event.edges()]
    assert sorted(by_events) == sorted(table)  # no edge without an event, none claimed by two
    for event in EVENTS:  # an event names no move the table lacks
        assert {(s, t) for s in event.sources for t in event.targets} == set(event.edges()), event.name
    assert {s for s in State if s.terminal} == TERMINAL == {State.SCORED, State.FAILED, State.ERROR, State.CANCELLED}
    assert all(not allowed(state, state) for state in State)  # staying put is never a move


def test_the_diagram_in_docs_is_the_table() -> None:
    document = DOC.read_text(encoding="utf-8")
    assert with_diagram(document) == document, "docs/hosting.md is stale: run python scripts/render_states.py"
    width = max(len(state.value) for state in State)
    for source, targets in TRANSITIONS.items():
        for target in targets:
            assert f"{source.value:>{width}} -> {target.value:<{width}}  {event_of(source, target).name}" in render_diagram()


def test_a_changed_table_fails_the_doc_check() -> None:
    document = DOC.read_text(encoding="utf-8")
    tampered = document.replace("   running -> scored       finish\n", "")
    assert tampered != document and with_diagram(tampered) != tampered
    with pytest.raises(InternalError, match="no generated state-table block"):
        with_diagram("no block here")


def _force(world: World, submission_id: str, state: State) -> None:
    """Put the row in ``state`` behind the lifecycle's back (the test's set-up; never a move)."""
    with world.db.session() as session:
        session.execute(update(Submission).where(Submission.id == submission_id).values(state=state))


def test_move_walks_every_pair_allowed_succeed_others_refused(world: World) -> None:
    submission_id = new_submission(world, queue=False)
    for source, target in EVERY_PAIR:
        _force(world, submission_id, source)
        with world.db.session() as session:
            submission = session.get(Submission, submission_id)
            assert submission is not None and submission.state is source
            version = submission.version
            if allowed(source, target):
                assert lifecycle.move(session, submission, target, event=event_of(source, target), actor="test", reason="walk")
                assert submission.state is target and submission.version == version + 1
                continue
            for event in EVENTS:  # whatever the event claims, a pair outside the table is refused
                with pytest.raises(InternalError, match=f"{source} -> {target}"):
                    lifecycle.move(session, submission, target, event=event, actor="test")
        after = state_of(world, submission_id)
        assert after.state is (target if allowed(source, target) else source)
    with world.db.session() as session:
        audited = session.scalars(
            select(Transition).where(Transition.submission_id == submission_id, Transition.reason == "walk").order_by(Transition.id)
        ).all()
        assert [(t.from_state, t.to_state) for t in audited] == [(s.value, t.value) for s, t in EVERY_PAIR if allowed(s, t)]


def test_an_event_cannot_make_another_events_move(world: World) -> None:
    submission_id = new_submission(world)  # queued
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        with pytest.raises(InternalError, match="event rejudge does not move a submission queued -> running"):
            lifecycle.move(session, submission, State.RUNNING, event=REJUDGE, actor="test")
    assert state_of(world, submission_id).state is State.QUEUED


def test_a_stale_read_moves_nothing(world: World) -> None:
    submission_id = new_submission(world)
    with world.db.session() as session:
        stale = session.get(Submission, submission_id)
        assert stale is not None
        session.expunge(stale)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None  # another writer moves it first
    with world.db.session() as session:
        session.add(stale)
        assert not lifecycle.move(session, stale, State.CANCELLED, event=event_of(State.QUEUED, State.CANCELLED), actor="test")
    assert state_of(world, submission_id).state is State.RUNNING


def test_events_that_do_not_apply_change_nothing(world: World) -> None:
    """A duplicate or late event is harmless: the event functions answer False/None, never raise."""
    submission_id = new_submission(world)
    assert not lifecycle.enqueue(world.db, world.dispatcher, submission_id, actor="test")  # already queued
    assert not lifecycle.rejudge_submission(world.db, world.dispatcher, submission_id, max_attempts=2)  # not finished
    claim = lifecycle.claim(world.db, world.workers[0], 30)
    assert claim is not None
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        assert lifecycle.finish(session, submission, State.SCORED, actor="test", reason="")  # running: it applies
    assert state_of(world, submission_id).state is State.SCORED
    assert not lifecycle.cancel_submission(world.db, submission_id)  # ended
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        assert lifecycle.retry_or_error(session, submission, actor="test", reason="late") is None
        assert not lifecycle.finish(session, submission, State.FAILED, actor="test", reason="late")
    assert lifecycle.rejudge_submission(world.db, world.dispatcher, submission_id, max_attempts=2)
    again = state_of(world, submission_id)
    assert (again.state, again.attempt_limit) == (State.QUEUED, 1 + 2)


def test_state_and_track_are_enums_checked_by_the_database(world: World) -> None:
    submission_id = new_submission(world)
    row = state_of(world, submission_id)
    assert row.state is State.QUEUED and row.track is Track.HIDDEN
    for column, value in (("state", "bogus"), ("track", "public")):
        with pytest.raises(IntegrityError), world.db.session() as session:  # the CHECK constraint, below the ORM
            session.execute(text(f"UPDATE submissions SET {column} = :value WHERE id = :id"), {"value": value, "id": submission_id})
    with pytest.raises(StatementError), world.db.session() as session:  # the ORM refuses before the database sees it
        session.execute(update(Submission).where(Submission.id == submission_id).values(state="bogus"))
    assert state_of(world, submission_id).state is State.QUEUED
