"""Waiting workers never block the server: claim long-polls replayed against a real `grader serve` over real sockets.

One server (SQLite, no local workers). Each long-poll is a raw socket that sends a whole claim and then waits
for the answer, as a worker's HTTP client does:

* 100 long-polls of 25 workers wait (4 each), and meanwhile ``/healthz``, the board's JSON and its page answer
  within 1 s (a claim used to hold one of the server's 40 threads for its whole wait: 45 waiting claims took
  ``/healthz`` from 0.1 s to 28 s; the latency figures are bench/long_polls.py's);
* 100 long-polls of one worker: 4 wait, the other 96 are answered 429 at once, with ``Retry-After``; a claim
  place is free again as soon as its client goes away, so a worker that drops its claim and claims again,
  as an honest one does after a lost connection, is never refused;
* the worker's own client (`grader worker`'s claims, a submission's and a shard job's) reads that 429 as a pause
  of ``Retry-After`` seconds, not as a server gone;
* a long-poll whose client went away takes no job: the job dispatched after it left goes to the next claim.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from grader import jsonio
from grader.hosting.api.long_poll import CLAIMS_PER_WORKER
from grader.hosting.db.session import open_database
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.participant.client import HostingClient
from grader.hosting.worker.claim_throttle import ClaimThrottled
from grader.hosting.worker.loop import WorkerApi
from grader.hosting.worker.shard_loop import ShardApi, fingerprint_digest
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, wait_for, worker_headers, write_competition

pytestmark = pytest.mark.slow  # a real server

#: The wait each long-poll asks for: the most a claim may (ClaimRequest.wait_s), far above every bound below.
WAIT_S = 30
#: How long /healthz and the board may take while the long-polls wait: far above their usual tens of
#: milliseconds, far below the 30 s a request queued behind the long-polls' threads used to wait.
ANSWER_S = 1.0
#: The fingerprint every worker here states (local workers on this machine): each claim names it.
FINGERPRINT = fingerprint_digest()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("long-polls")
    served = Server(write_competition(root / "c.toml"), root / "state", workers=0).start()
    try:
        yield served
    finally:
        served.stop()


def tokens(server: Server, *names: str) -> list[str]:
    """Tokens of local workers ``names``, each with its fingerprint stated (bound: every claim names it)."""
    db = open_database(server.state)
    with db.session() as session:
        found = [rekey_local_worker(session, name) for name in names]
    db.dispose()
    assert all(stated_fingerprint(server.url, token) == FINGERPRINT for token in found)
    return found


def long_poll(server: Server, token: str, *, shard: bool = False, wait_s: float = WAIT_S) -> socket.socket:
    """A claim (``/claim`` or ``/shards/claim``) sent whole over a socket of its own; its answer is left unread."""
    path, body = (
        ("/api/v1/worker/shards/claim", claim_body(FINGERPRINT, wait_s)) if shard else ("/api/v1/worker/claim", claim_body(FINGERPRINT, wait_s))
    )
    raw = jsonio.dumps(body).encode()
    headers = {**worker_headers(token), "Host": "grader", "Content-Type": "application/json", "Content-Length": str(len(raw))}
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S + 30)
    sock.sendall(f"POST {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode() + b"\r\n" + raw)
    return sock


def answered(sock: socket.socket) -> bytes:
    """What the server has answered on ``sock`` so far (b"" while the long-poll waits)."""
    sock.setblocking(False)
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return b""
    finally:
        sock.setblocking(True)


def claim_now(server: Server, token: str) -> int:
    return httpx.post(f"{server.url}/api/v1/worker/claim", json=claim_body(FINGERPRINT), headers=worker_headers(token), timeout=WAIT_S).status_code


def assert_the_server_answers_others(server: Server) -> None:
    for path in ("/healthz", "/api/v1/leaderboard", "/"):
        started = time.monotonic()
        status = httpx.get(f"{server.url}{path}", timeout=WAIT_S).status_code
        took = time.monotonic() - started
        assert status == 200 and took < ANSWER_S, f"{path}: {status} after {took:.2f} s"


def test_healthz_and_the_board_answer_within_a_second_while_100_long_polls_wait(server: Server) -> None:
    workers = tokens(server, *(f"poll-{n}" for n in range(25)))
    assert_the_server_answers_others(server)  # each route once before, so the bound is not a first call's imports
    polls = [long_poll(server, token, shard=n % 2 == 1) for token in workers for n in range(CLAIMS_PER_WORKER)]
    try:
        time.sleep(2)  # every claim read and waiting
        for _ in range(3):
            assert_the_server_answers_others(server)
        assert [answered(sock) for sock in polls] == [b""] * 100  # all 100 still waiting, none refused
    finally:
        for sock in polls:
            sock.close()
    # each worker's places are free again once its clients went away
    wait_for(lambda: all(claim_now(server, token) == 204 for token in workers), timeout=10, what="the claim places freed")


def test_a_worker_has_at_most_4_claims_in_progress_and_an_honest_one_is_never_refused(server: Server) -> None:
    (token,) = tokens(server, "greedy")
    polls = [long_poll(server, token, shard=n % 2 == 1) for n in range(100)]
    answers: dict[int, bytes] = {}

    def collect() -> int:
        for n, sock in enumerate(polls):
            answers[n] = answers.get(n, b"") + answered(sock)
        return sum(1 for got in answers.values() if got.endswith(b"}"))  # a whole answer: its head and JSON body

    try:
        wait_for(lambda: collect() >= 100 - CLAIMS_PER_WORKER, timeout=20, what="the refusals")
        assert_the_server_answers_others(server)
        time.sleep(1)
        assert collect() == 100 - CLAIMS_PER_WORKER  # the 4 admitted still wait
        for got in (got for got in answers.values() if got):
            head, _, body = got.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").lower().split("\r\n")
            retry = [line.split(":", 1)[1].strip() for line in lines if line.startswith("retry-after:")]
            detail = jsonio.loads(body)["detail"]
            assert lines[0].startswith("http/1.1 429") and len(retry) == 1 and 1 <= int(retry[0]) <= WAIT_S, head
            assert "\n" not in detail and "claims in progress" in detail, detail
    finally:
        for sock in polls:
            sock.close()
    # An honest worker makes one claim at a time; one whose connection dropped claims again at once: never refused.
    wait_for(lambda: claim_now(server, token) == 204, timeout=10, what="the greedy worker's places freed")
    (honest,) = tokens(server, "honest")
    for _ in range(20):
        sock = long_poll(server, honest)
        time.sleep(0.05)
        sock.close()
        assert claim_now(server, honest) == 204


def test_the_workers_client_reads_the_429_as_a_pause_of_retry_after(server: Server) -> None:
    """`grader worker`'s own claims, on a worker with 4 claims waiting: both paths read the 429 as a pause of what
    ``Retry-After`` says (tests/hosting/test_worker_claim_throttle.py: the loop then waits it and claims again)."""
    (token,) = tokens(server, "paused")
    polls = [long_poll(server, token, shard=n % 2 == 1) for n in range(CLAIMS_PER_WORKER)]
    try:
        time.sleep(1)  # the four read and waiting
        api = WorkerApi(server.url, token)
        with pytest.raises(ClaimThrottled) as whole:
            api.claim(wait_s=0)
        with pytest.raises(ClaimThrottled) as shard:
            ShardApi(api.http).claim(FINGERPRINT)
        assert 1 <= whole.value.wait_s <= WAIT_S and 1 <= shard.value.wait_s <= WAIT_S, (whole.value, shard.value)
    finally:
        for sock in polls:
            sock.close()


def test_a_long_poll_whose_client_went_away_takes_no_job(server: Server) -> None:
    gone, next_one = tokens(server, "gone", "next")
    participant = admin(server.state, "add-participant", "lea").strip()
    sock = long_poll(server, gone)
    time.sleep(1)  # its claim read, its long-poll waiting
    sock.close()
    view = HostingClient(server.url, participant).submit(REPO / "submissions_example" / "onnx-lsa")  # dispatched: wakes every long-poll
    time.sleep(1)
    job = httpx.post(f"{server.url}/api/v1/worker/claim", json=claim_body(FINGERPRINT, 10), headers=worker_headers(next_one), timeout=WAIT_S)
    assert job.status_code == 200 and (job.json()["submission_id"], job.json()["attempt"]) == (view["id"], 1)
    assert "worker next: attempt 1 claimed" in admin(server.state, "history", view["id"])
