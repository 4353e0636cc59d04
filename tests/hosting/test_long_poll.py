"""The claim long-poll's parts, in process: the dispatcher's wait without a thread, the per-worker gate, the loop.

Over real sockets against a real server: tests/hosting/test_attacks_long_polls.py.
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from typing import Any, cast

import anyio
import pytest
from fastapi import HTTPException, Request

from grader.hosting.api.long_poll import CLAIMS_PER_WORKER, ClaimGate, long_poll
from grader.hosting.queue.dispatch import LocalDispatcher
from grader.hosting.services.jobs import Empty


class Client:
    """What long_poll asks of a request: whether its client is gone, and the next message (a disconnect, after ``leaves_after`` s)."""

    def __init__(self, *, gone: bool = False, leaves_after: float | None = None) -> None:
        self.gone = gone
        self.leaves_after = leaves_after

    async def is_disconnected(self) -> bool:
        return self.gone

    async def receive(self) -> dict[str, Any]:
        if self.leaves_after is None:
            await anyio.sleep_forever()
        await anyio.sleep(cast(float, self.leaves_after))
        self.gone = True
        return {"type": "http.disconnect"}


def request(client: Client) -> Request:
    return cast(Request, client)


def test_a_dispatch_from_another_thread_wakes_an_async_wait() -> None:
    dispatcher = LocalDispatcher()

    async def main() -> float:
        seen = dispatcher.generation()
        threading.Timer(0.1, dispatcher.dispatch, args=("s1",)).start()
        started = time.monotonic()
        await dispatcher.wait_async(seen, 60)
        return time.monotonic() - started

    assert anyio.run(main) < 30  # woken, not timed out (60 s)
    assert not dispatcher._waiters  # nothing left behind


def test_an_async_wait_ends_at_its_timeout_and_at_once_after_a_dispatch_it_missed() -> None:
    dispatcher = LocalDispatcher()

    async def main() -> tuple[float, float]:
        seen = dispatcher.generation()
        started = time.monotonic()
        await dispatcher.wait_async(seen, 0.2)
        timed_out = time.monotonic() - started
        dispatcher.dispatch("s1")
        started = time.monotonic()
        await dispatcher.wait_async(seen, 60)  # the dispatch came after `seen` was read: no wait
        return timed_out, time.monotonic() - started

    timed_out, missed = anyio.run(main)
    assert 0.15 < timed_out < 30 and missed < 30
    assert not dispatcher._waiters


def test_a_worker_has_at_most_its_claims_in_progress_the_next_is_429_with_retry_after() -> None:
    gate = ClaimGate()
    with ExitStack() as held:
        for _ in range(CLAIMS_PER_WORKER):
            held.enter_context(gate.admit(7, 30))
        with pytest.raises(HTTPException) as refused, gate.admit(7, 30):
            pass
        assert refused.value.status_code == 429 and "\n" not in str(refused.value.detail)
        assert refused.value.headers is not None and 1 <= int(refused.value.headers["Retry-After"]) <= 30
        with gate.admit(8, 30):  # another worker is not refused
            assert gate.in_progress(8) == 1
        assert gate.in_progress(7) == CLAIMS_PER_WORKER
    assert gate.in_progress(7) == 0 and not gate._claims  # each place given back, no entry kept
    with gate.admit(7, 30):
        pass


def test_a_gone_client_never_looks_and_one_that_leaves_while_waiting_ends_the_wait() -> None:
    dispatcher, gate = LocalDispatcher(), ClaimGate()
    looks: list[float] = []

    def look() -> Empty:
        looks.append(time.monotonic())
        return Empty.WAIT

    async def main() -> tuple[object, object, float]:
        gone = await long_poll(request(Client(gone=True)), gate, dispatcher, 30, look)
        started = time.monotonic()
        leaving = await long_poll(request(Client(leaves_after=0.05)), gate, dispatcher, 30, look)
        return gone, leaving, time.monotonic() - started

    gone, leaving, took = anyio.run(main)
    assert gone is None and leaving is None and len(looks) == 1 and took < 15  # not the 30 s asked for


def test_looks_until_one_finds_and_end_stops_at_once() -> None:
    dispatcher, gate = LocalDispatcher(), ClaimGate()
    answers = [Empty.WAIT, Empty.WAIT, "job"]

    def look() -> str | Empty:
        return answers.pop(0)

    def end() -> str | Empty:
        return Empty.END

    async def main() -> tuple[object, object]:
        threading.Timer(0.05, dispatcher.dispatch, args=("s1",)).start()
        return await long_poll(request(Client()), gate, dispatcher, 30, look), await long_poll(request(Client()), gate, dispatcher, 30, end)

    assert anyio.run(main) == ("job", None)
    assert not answers


def test_looks_run_in_the_gates_threads_at_most_that_many_at_once() -> None:
    dispatcher, gate = LocalDispatcher(), ClaimGate(look_threads=2)
    lock, running, most, loop_thread = threading.Lock(), [0], [0], [threading.get_ident()]

    def look() -> str:
        assert threading.get_ident() != loop_thread[0]  # never on the event loop
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return "job"

    async def main() -> None:
        loop_thread[0] = threading.get_ident()
        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(long_poll, request(Client()), gate, dispatcher, 30, look)

    anyio.run(main)
    assert most[0] == 2
