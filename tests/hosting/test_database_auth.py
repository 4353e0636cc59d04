"""Tokens of participants and workers: stored hashed, told apart, revocable (SQLite and PostgreSQL)."""

from __future__ import annotations

from sqlalchemy import select

from grader.hosting.db.models import Participant
from grader.hosting.identity.auth import participant_by_token, worker_by_token
from grader.hosting.identity.participants import mark_participant_revoked, rekey_local_worker
from tests.hosting.world import World


def test_tokens_are_stored_hashed_and_revocable(world: World) -> None:
    with world.db.session() as session:
        stored = session.scalar(select(Participant.token_sha256).where(Participant.name == "alice"))
        assert stored is not None and world.tokens["alice"] not in stored and len(stored) == 64
        found = participant_by_token(session, world.tokens["alice"])
        assert found is not None and found.name == "alice"
        assert participant_by_token(session, world.tokens["alice"] + "x") is None
        assert worker_by_token(session, world.tokens["alice"]) is None  # a participant token is no worker token
        mark_participant_revoked(session, "alice")
    with world.db.session() as session:
        assert participant_by_token(session, world.tokens["alice"]) is None


def test_worker_tokens_are_hashed_told_apart_from_participants_and_replaced_by_a_rekey(world: World) -> None:
    with world.db.session() as session:
        token = rekey_local_worker(session, "w1")
    with world.db.session() as session:
        worker = worker_by_token(session, token)
        assert worker is not None and worker.name == "w1" and worker.id == world.workers[0]
        assert token not in worker.token_sha256 and len(worker.token_sha256) == 64
        assert participant_by_token(session, token) is None  # a worker token is no participant token
        replaced = rekey_local_worker(session, "w1")
    with world.db.session() as session:
        assert worker_by_token(session, token) is None  # the old token stops working at the re-key
        found = worker_by_token(session, replaced)
        assert found is not None and found.id == world.workers[0]
