"""One idempotency key, one body at a time, decided at the database (SQLite, and a real PostgreSQL in the slow half).

A copy of an upload is "arriving" while its reservation's ``arrived_at`` is under
``upload.stall_s`` old: another copy under its key is refused 409 "in progress" on its
headers; once that copy stalls, the other takes its reservation over (no second slot),
and the stalled copy, reading nothing, learns it at its next refresh, stops and removes
its temporary file. The replay over real sockets is tests/hosting/test_upload_retries.py.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import pytest
from sqlalchemy import select, update

from grader.hosting.clock import utcnow
from grader.hosting.context import ServerContext
from grader.hosting.db.models import UploadReservation
from grader.hosting.errors import RefusedSubmission, UploadInProgress, UploadTakenOver
from grader.hosting.identity.principal import Principal, Role
from grader.hosting.intake import uploads
from grader.hosting.intake.quotas import quota_status
from grader.hosting.states import Track
from tests.hosting.world import World

BODY = b"x" * 4096


def context(world: World) -> ServerContext:
    return ServerContext(
        competition=world.competition,
        db=world.db,
        state=world.state,
        dispatcher=world.dispatcher,
        pin_id=world.pin_id,
        signing_key=world.key,
        benchmark_target="mini",
        tasks=[],
        split="test",
        sample_split="dev",
    )


def head_of(body: bytes, key: str = "k" * 32) -> uploads.UploadHead:
    digest = "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"
    return uploads.read_head({"content-length": str(len(body)), "idempotency-key": key, "content-digest": digest}, 1 << 20)


def alice(world: World) -> Principal:
    return Principal(Role.PARTICIPANT, world.participant_id, "alice")


def stall(world: World, by_s: float) -> None:
    """Move every reservation's mark ``by_s`` into the past (its copy sent nothing since)."""
    with world.db.session() as session:
        for row in session.scalars(select(UploadReservation)):
            row.arrived_at = row.arrived_at - timedelta(seconds=by_s)


def in_flight(world: World) -> int:
    with world.db.session() as session:
        return quota_status(session, world.competition, world.participant_id, Track.HIDDEN, utcnow()).in_flight


def test_a_copy_arriving_keeps_its_key_and_a_stalled_one_is_taken_over(world: World) -> None:
    ctx, head = context(world), head_of(BODY)
    first = uploads.admit(ctx, alice(world), Track.HIDDEN, head)
    with pytest.raises(UploadInProgress) as busy:  # refused on its headers: nothing of its body is read
        uploads.admit(ctx, alice(world), Track.HIDDEN, head)
    assert busy.value.status == 409 and busy.value.retry_at is not None
    assert timedelta(0) < busy.value.retry_at - utcnow() <= timedelta(seconds=world.competition.unpack.stall_s)
    with pytest.raises(RefusedSubmission) as reused:  # another body under the key: the final 409, not "in progress"
        uploads.admit(ctx, alice(world), Track.HIDDEN, head_of(BODY + b"!"))
    assert reused.value.status == 409 and not isinstance(reused.value, UploadInProgress)
    stall(world, world.competition.unpack.stall_s - 1)
    assert uploads.refresh(ctx, first, progressed=True)  # bytes came: arriving again, for stall_s from now
    stall(world, world.competition.unpack.stall_s - 1)
    with pytest.raises(UploadInProgress):
        uploads.admit(ctx, alice(world), Track.HIDDEN, head)
    stall(world, 2)
    retry = uploads.admit(ctx, alice(world), Track.HIDDEN, head)  # stalled: taken over
    assert retry.holder != first.holder and retry.existing is None
    assert in_flight(world) == 1  # the same slot, not a second one
    assert not uploads.refresh(ctx, first, progressed=False) and not uploads.refresh(ctx, first, progressed=True)
    assert uploads.refresh(ctx, retry, progressed=False)
    uploads.release(ctx, first)  # the stalled copy's end releases nothing it no longer holds
    assert in_flight(world) == 1
    with world.db.session() as session:  # a copy that sends nothing until its reservation expires ends too
        session.execute(update(UploadReservation).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert not uploads.refresh(ctx, retry, progressed=False)


def test_a_refresh_between_the_read_and_the_takeover_keeps_the_copy(world: World) -> None:
    """The takeover is a compare-and-set on the mark: a copy that showed progress after the admission read it keeps its key."""
    ctx, head = context(world), head_of(BODY)
    first = uploads.admit(ctx, alice(world), Track.HIDDEN, head)
    stall(world, world.competition.unpack.stall_s + 1)
    with world.db.session() as session:
        held = session.scalars(select(UploadReservation)).one()
        uploads.refresh(ctx, first, progressed=True)  # committed by the first copy meanwhile (another connection)
        with pytest.raises(UploadInProgress):
            uploads._take_over(session, held, "retry", utcnow(), utcnow() + timedelta(seconds=60), world.competition.unpack.stall_s)
    assert uploads.refresh(ctx, first, progressed=False)


def test_a_stalled_copy_that_reads_nothing_stops_when_taken_over_and_leaves_no_file(world: World) -> None:
    ctx, head = context(world), head_of(BODY)

    async def stalls() -> AsyncIterator[bytes]:
        yield BODY[:1024]
        await anyio.sleep(3600)  # the client sends nothing more, and the connection stays open
        yield BODY[1024:]

    outcome: list[BaseException] = []

    async def first_copy() -> None:
        try:
            await uploads.receive_submission(ctx, alice(world), Track.HIDDEN, {k.lower(): v for k, v in headers.items()}, stalls())
        except UploadTakenOver as error:
            outcome.append(error)

    headers = {
        "content-length": str(len(BODY)),
        "idempotency-key": head.key,
        "content-digest": "sha-256=:" + base64.b64encode(hashlib.sha256(BODY).digest()).decode() + ":",
    }

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(first_copy)
            await anyio.sleep(1.5 * uploads.REFRESH_S)  # its first bytes came and were marked
            assert list(ctx.state.tmp.iterdir())  # its temporary file
            await anyio.to_thread.run_sync(stall, world, world.competition.unpack.stall_s + 1)
            await anyio.to_thread.run_sync(uploads.admit, ctx, alice(world), Track.HIDDEN, head)
            with anyio.fail_after(5 * uploads.REFRESH_S):  # it learns within a refresh or two, without a byte more
                while not outcome:
                    await anyio.sleep(0.05)

    anyio.run(main)
    assert "took its reservation over" in str(outcome[0])
    assert not list(ctx.state.tmp.iterdir())  # its temporary file removed
    assert in_flight(world) == 1  # the retry's reservation, untouched by the stalled copy's end


def test_a_copy_being_checked_stays_marked_arriving(world: World) -> None:
    """While the complete body is checked (unpacking can take a while), the mark is refreshed: a retry waits, it does not unpack the body again."""
    ctx, head = context(world), head_of(BODY)
    first = uploads.admit(ctx, alice(world), Track.HIDDEN, head)
    stall(world, world.competition.unpack.stall_s + 1)

    def slow_check() -> str:
        time.sleep(2.5 * uploads.REFRESH_S)
        return "checked"

    assert anyio.run(uploads._while_held, ctx, first, slow_check) == "checked"
    with pytest.raises(UploadInProgress):
        uploads.admit(ctx, alice(world), Track.HIDDEN, head)
