"""The notifications' outbox on the database (SQLite and PostgreSQL): written in the move's transaction or not at all,
taken once per try, ended when the address changes, given up after its tries or its age. No socket: the addresses
tried here are refused by the guard before any connection."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import delete, select, update

from grader.hosting.clock import utcnow
from grader.hosting.config import NotifyPolicy
from grader.hosting.db.models import NotifyDelivery, Submission, Team, TeamMember
from grader.hosting.notify import outbox, settings
from grader.hosting.notify.sender import Sender, body
from grader.hosting.queue import lifecycle
from grader.hosting.states import CANCEL, State
from tests.hosting.world import World, new_submission

METADATA = "http://169.254.169.254/latest/meta-data/"


def _deliveries(world: World) -> list[NotifyDelivery]:
    with world.db.session() as session:
        return list(session.scalars(select(NotifyDelivery).order_by(NotifyDelivery.id)).all())


def _set(world: World, url: str | None = METADATA, email: str | None = None) -> None:
    with world.db.session() as session:
        if url is not None:
            settings.set_webhook(session, world.participant_id, url)
        settings.set_email(session, world.participant_id, email)


def test_a_move_adds_one_delivery_per_address_in_its_transaction(world: World) -> None:
    new_submission(world)
    assert _deliveries(world) == []  # nothing set: nothing to deliver
    _set(world, email="alice@example.org")
    submission_id = new_submission(world)
    rows = _deliveries(world)
    assert sorted(r.channel for r in rows) == ["email", "webhook"]
    assert {r.address for r in rows} == {METADATA, "alice@example.org"}
    facts = rows[0].facts
    assert rows[1].facts == facts and (facts["type"], facts["submission"], facts["from"], facts["state"]) == (
        outbox.STATE_CHANGE,
        submission_id,
        "received",
        "queued",
    )
    assert set(facts) == {"id", "at", "type", "submission", "from", "state"}
    with pytest.raises(RuntimeError), world.db.session() as session:  # a move that rolls back leaves no notification
        submission = session.get(Submission, submission_id)
        assert submission is not None
        assert lifecycle.move(session, submission, State.CANCELLED, event=CANCEL, actor="test")
        raise RuntimeError("the transaction fails after the move")
    assert len(_deliveries(world)) == 2
    assert lifecycle.cancel_submission(world.db, submission_id)
    assert len(_deliveries(world)) == 4
    assert b'"competition": "c"' in body("c", facts) and body("c", facts) == body("c", dict(reversed(facts.items())))  # canonical


def test_two_senders_take_each_delivery_once_and_a_cleared_webhook_ends_it_untried(world: World) -> None:
    _set(world)
    for _ in range(3):
        new_submission(world)
    taken: list[list[outbox.Pending]] = []
    start = threading.Barrier(2)

    def take() -> None:
        start.wait()
        with world.db.session() as session:
            taken.append(outbox.take_due(session, utcnow(), 10, hold_s=60))

    threads = [threading.Thread(target=take) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [p.id for batch in taken for p in batch]
    assert sorted(ids) == sorted({r.id for r in _deliveries(world)}) and len(ids) == 3
    with world.db.session() as session:  # due again (a server killed mid-try), but the participant cleared the webhook
        session.execute(update(NotifyDelivery).values(next_at=utcnow()))
        settings.clear_webhook(session, world.participant_id)
    with world.db.session() as session:
        assert outbox.take_due(session, utcnow(), 10, hold_s=60) == []
    assert {r.outcome for r in _deliveries(world)} == {"given up: the address was changed or cleared"}


def test_a_refused_delivery_is_retried_with_backoff_then_given_up(world: World) -> None:
    _set(world)
    new_submission(world)
    sender = Sender(world.db, "c", NotifyPolicy(attempts=3, backoff_s=30))
    for tries in (1, 2, 3):
        (pending,) = sender.take()
        assert pending.tries == tries and pending.secret is not None and pending.secret.startswith("whsec_")
        before = utcnow()
        sender.deliver(pending)
        (row,) = _deliveries(world)
        if tries < 3:
            assert row.done_at is None and row.outcome.startswith(f"try {tries} failed: refused: 169.254.169.254")
            assert row.next_at >= before + timedelta(seconds=30 * 2 ** (tries - 1))  # the backoff doubles
            assert sender.take() == []  # not due before its backoff
            with world.db.session() as session:
                session.execute(update(NotifyDelivery).values(next_at=utcnow()))
    assert row.done_at is not None and row.outcome.startswith("given up after 3 tries: refused")


def test_a_delivery_older_than_max_age_is_given_up_untried(world: World) -> None:
    _set(world)
    new_submission(world)
    with world.db.session() as session:
        session.execute(update(NotifyDelivery).values(created_at=utcnow() - timedelta(seconds=120)))
    sender = Sender(world.db, "c", NotifyPolicy(max_age_s=60))
    (pending,) = sender.take()
    sender.deliver(pending)
    (row,) = _deliveries(world)
    assert row.done_at is not None and "older than [notify] max_age_s (60 s)" in row.outcome


def test_a_rescoring_is_a_board_change_and_says_no_score(world: World) -> None:
    _set(world)
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    with world.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        assert lifecycle.finish(session, submission, State.SCORED, actor="test", reason="scored", result_id=1, public_score=0.25)
        assert lifecycle.replace_result(session, submission, result_id=2, public_score=0.75)
    facts = [row.facts for row in _deliveries(world)]
    assert [(f["type"], f["state"]) for f in facts] == [
        (outbox.STATE_CHANGE, "queued"),
        (outbox.STATE_CHANGE, "running"),
        (outbox.STATE_CHANGE, "scored"),
        (outbox.BOARD_CHANGE, "scored"),
    ]
    assert all("0.75" not in str(f) and "0.25" not in str(f) for f in facts)


def test_ended_deliveries_are_kept_a_week_then_pruned(world: World) -> None:
    _set(world)
    new_submission(world)
    new_submission(world)
    sender = Sender(world.db, "c", NotifyPolicy())
    first, second = sender.take()
    with world.db.session() as session:
        outbox.end(session, first.id, "delivered")
        outbox.end(session, second.id, "delivered")
        session.execute(update(NotifyDelivery).where(NotifyDelivery.id == first.id).values(done_at=utcnow() - timedelta(days=8)))
    assert sender.prune() == 1
    assert [row.id for row in _deliveries(world)] == [second.id]


def test_a_member_who_left_hears_no_more_of_the_teams_submission_they_made(world: World) -> None:
    _set(world)
    with world.db.session() as session:  # alice in a team, and a submission she made for it
        team = Team(name="Lighthouse", created_at=utcnow())
        session.add(team)
        session.flush()
        session.add(TeamMember(participant_id=world.participant_id, team_id=team.id, joined_at=utcnow()))
    submission_id = new_submission(world, queue=False)
    with world.db.session() as session:
        session.execute(update(Submission).where(Submission.id == submission_id).values(team_id=team.id))
    assert lifecycle.enqueue(world.db, world.dispatcher, submission_id, actor="test")
    told = len(_deliveries(world))
    assert told >= 1  # a member hears of the team's submission she made
    with world.db.session() as session:
        session.execute(delete(TeamMember).where(TeamMember.participant_id == world.participant_id))
    assert lifecycle.cancel_submission(world.db, submission_id)
    assert len(_deliveries(world)) == told  # she left: the team's submission is not hers to hear of


def test_a_sender_whose_database_is_down_says_so_once_backs_off_and_says_when_it_recovers(
    world: World, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from grader.hosting.db.session import Database
    from grader.hosting.notify import sender as sender_module
    from tests.hosting.support import wait_for

    with socket.socket() as probe:  # a port nothing listens on: every connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(sender_module, "POLL_S", 0.05)
    monkeypatch.setattr(sender_module, "FAILING_POLL_S", 0.4)
    looks: list[float] = []

    class Counted(Sender):
        def take(self) -> list[outbox.Pending]:
            looks.append(time.monotonic())
            return super().take()

    down = Database(f"postgresql+psycopg://grader@127.0.0.1:{port}/grader")
    sender = Counted(down, "c", NotifyPolicy())
    caplog.set_level("WARNING", logger=sender_module.log.name)
    sender.start()
    try:
        wait_for(lambda: len(looks) >= 6, 30, what="six failed passes")
        said = [r for r in caplog.records if r.name == sender_module.log.name]
        assert len(said) == 1 and "a pass of the sender failed (OperationalError: " in said[0].getMessage()
        assert said[0].exc_info is None and "\n" not in said[0].getMessage()  # one line, no traceback
        gaps = [b - a for a, b in itertools.pairwise(looks[2:])]
        assert min(gaps) >= 0.35  # backed off to FAILING_POLL_S, not every POLL_S
        sender.db = world.db  # the database is back
        wait_for(lambda: any("succeed again" in r.getMessage() for r in caplog.records), 30, what="the recovery said")
    finally:
        sender.stop()
        sender.join(10)
        down.dispose()
