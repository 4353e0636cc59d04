"""Loose ends of the lifecycle: a rolled-back result leaves no folder, a claim under contention
finds the job that waits, the Celery dispatcher is closed at shutdown, one worker entry point, one reader of the environment."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.orm import ORMExecuteState

from grader.hosting import environment
from grader.hosting.config import load_competition
from grader.hosting.db.models import Result, Submission
from grader.hosting.errors import ClientError, LostRace
from grader.hosting.participant.client import token_from
from grader.hosting.queue import lifecycle
from grader.hosting.server import Reaper, ServeOptions, prepare, shutdown
from grader.hosting.states import State
from tests.hosting.posting import accept_posted
from tests.hosting.redis import redis_server  # noqa: F401 - fixture
from tests.hosting.support import Server, wait_for, write_competition
from tests.hosting.world import World, new_submission, state_of


@contextmanager
def before_submission_updates(world: World, action: Callable[[ORMExecuteState], None]) -> Iterator[None]:
    """Run ``action`` on the same connection just before each ORM UPDATE of ``submissions``: another writer's
    committed change, interleaved deterministically (the row really changes under the statement's guard)."""

    def hook(state: ORMExecuteState) -> None:
        if state.is_update and getattr(state.statement, "table", None) is not None and state.statement.table.name == "submissions":  # type: ignore[attr-defined]
            action(state)

    event.listen(world.db.sessions, "do_orm_execute", hook)
    try:
        yield
    finally:
        event.remove(world.db.sessions, "do_orm_execute", hook)


def test_a_result_rolled_back_on_purpose_leaves_no_folder(world: World) -> None:
    submission_id = new_submission(world)
    assert lifecycle.claim(world.db, world.workers[0], 30) is not None
    payload = {"failure_code": "OOM", "message": "killed", "logs": {"grade": "the container's log"}}
    folder = world.state.result_dir(submission_id, 1)

    def another_writer_first(state: ORMExecuteState) -> None:
        state.session.connection().execute(text("UPDATE submissions SET version = version + 1 WHERE id = :id"), {"id": submission_id})

    with before_submission_updates(world, another_writer_first), pytest.raises(LostRace, match="another writer moved it"):
        accept_posted(world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload=payload)
    assert not folder.exists()  # the logs were written before the transaction; it rolled back, so they went too
    with world.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Result)) == 0
    assert state_of(world, submission_id).state is State.RUNNING  # nothing of the attempt was recorded
    # the worker posts again and is heard: the rollback left the lease intact
    verdict = accept_posted(world.db, world.state, world.key, submission_id=submission_id, attempt=1, worker_id=world.workers[0], payload=payload)
    assert (verdict.status, verdict.state) == ("accepted", "failed")
    assert (folder / "logs" / "grade.log").read_text(encoding="utf-8") == "the container's log"


def test_a_claim_that_loses_every_optimistic_round_still_gets_the_waiting_job(world: World) -> None:
    """Other workers take every job this one tries, round after round; it then claims under the queue's lock."""
    lost = lifecycle.CLAIM_ROUNDS * lifecycle.CLAIM_BATCH
    ids = [new_submission(world, uploaded_ago_s=1000 - index) for index in range(lost + 2)]
    stolen: list[str] = []

    def another_worker_takes_the_oldest(state: ORMExecuteState) -> None:
        if len(stolen) == lost:
            return
        connection = state.session.connection()
        oldest = connection.execute(text("SELECT id FROM submissions WHERE state = 'queued' ORDER BY uploaded_at, id LIMIT 1")).scalar_one()
        connection.execute(
            text("UPDATE submissions SET state = 'running', version = version + 1, attempt = attempt + 1, lease_worker_id = :w WHERE id = :id"),
            {"w": world.workers[1], "id": oldest},
        )
        stolen.append(oldest)

    with before_submission_updates(world, another_worker_takes_the_oldest):
        claim = lifecycle.claim(world.db, world.workers[0], 30)
    assert stolen == ids[:lost]  # it tried each job in upload order and lost each one
    assert claim is not None and claim.submission_id == ids[lost] and claim.attempt == 1
    mine = state_of(world, ids[lost])
    assert (mine.state, mine.lease_worker_id) == (State.RUNNING, world.workers[0])
    assert state_of(world, ids[lost + 1]).state is State.QUEUED


def test_concurrent_claims_each_get_a_distinct_job(world: World) -> None:
    count = 6
    ids = {new_submission(world, uploaded_ago_s=100 - index) for index in range(count)}
    start = threading.Barrier(count)
    claims: list[lifecycle.Claim | None] = []
    lock = threading.Lock()

    def take(worker_id: int) -> None:
        start.wait()
        got = lifecycle.claim(world.db, worker_id, 30)
        with lock:
            claims.append(got)

    threads = [threading.Thread(target=take, args=(world.workers[index % 2],)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert None not in claims  # nobody came back empty-handed while jobs waited
    assert {claim.submission_id for claim in claims if claim is not None} == ids
    with world.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Submission).where(Submission.state == State.QUEUED)) == 0


def test_the_environment_is_read_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = environment.environment({environment.TOKEN: "gp_secret", environment.BROKER: "", environment.SERVER: "http://h"})
    assert (seen.token, seen.broker, seen.server, seen.worker_token) == ("gp_secret", None, "http://h", None)  # empty counts as unset
    assert "gp_secret" not in repr(seen)
    assert environment.with_worker_token("gw_x", {"PATH": "/bin"}) == {"PATH": "/bin", environment.WORKER_TOKEN: "gw_x"}
    monkeypatch.setenv(environment.TOKEN, "gp_from_env")
    assert token_from(None) == "gp_from_env" and token_from("gp_option") == "gp_option"
    monkeypatch.delenv(environment.TOKEN)
    with pytest.raises(ClientError, match="GRADER_TOKEN"):
        token_from(None)


@pytest.mark.slow
def test_shutdown_closes_the_celery_dispatcher_after_publishing(tmp_path: Path, redis_server) -> None:  # type: ignore[no-untyped-def]
    import redis

    from grader.hosting.queue.celery_app import QUEUE
    from grader.hosting.queue.celery_dispatch import CeleryDispatcher

    competition = load_competition(write_competition(tmp_path / "c.toml"))
    ctx, _db = prepare(ServeOptions(competition=competition, state_dir=tmp_path / "state", workers=0, broker=redis_server.url))
    dispatcher = ctx.dispatcher
    assert isinstance(dispatcher, CeleryDispatcher)
    for submission_id in ("s1", "s2", "s3"):
        dispatcher.dispatch(submission_id)
    shutdown(ctx, Reaper(ctx), None)
    assert not dispatcher._thread.is_alive()  # closed: its publisher finished what was pending and ended
    assert (dispatcher.published, dispatcher.failed) == (3, 0)
    assert redis.Redis.from_url(redis_server.url).llen(QUEUE) == 3


@pytest.mark.slow
def test_local_workers_are_grader_worker_and_end_with_their_server(tmp_path: Path) -> None:
    server = Server(write_competition(tmp_path / "c.toml"), tmp_path / "state", workers=1).start()
    try:
        assert server.process is not None
        pid = wait_for(lambda: server.worker_pids() and server.worker_pids()[0], what="the local worker's pid file")
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert command[1:6] == [b"-m", b"grader", b"worker", b"--local-of", str(server.process.pid).encode()]
        assert not any(b"gw_" in part for part in command)  # the token travels in the environment only
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
        server.kill9()
        wait_for(lambda: not _alive(pid), timeout=60, what="the local worker to exit with its server")
    finally:
        server.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"  # a zombie has ended; it only waits to be reaped
