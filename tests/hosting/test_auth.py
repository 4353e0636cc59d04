"""Authentication is one dependency (grader.hosting.api.auth) for the API, the web sign-in and /metrics.

Every route but the public ones refuses an anonymous caller; tokens are per role;
one failure limiter counts failed sign-ins of all three doors; revoking a token
ends both its API access and its web session.
"""

from __future__ import annotations

import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from grader.hosting.api.app import create_app
from grader.hosting.api.routes import leaderboard, meta, notify, participants, resumable, signup, teams, web, web_notify, workers
from grader.hosting.db.models import Participant, WebSession
from grader.hosting.db.session import Database
from grader.hosting.identity.auth import SESSIONS_PER_PARTICIPANT, by_session, new_metrics_token, start_session
from grader.hosting.identity.ratelimit import FailureLimiter, client_bucket
from grader.hosting.protocol.version import HEADER, WORKER_PROTOCOL
from grader.hosting.services.admin import add_worker, revoke_participant
from tests.hosting.world import World

#: What anyone may read without a token.
PUBLIC = {
    ("GET", "/"),
    ("GET", "/signin"),
    ("GET", "/signup"),  # a competition that takes sign-ups (this one takes none: 404)
    ("GET", "/assets/board.css"),
    ("GET", "/assets/upload.js"),
    ("GET", "/assets/progress.js"),
    ("GET", "/assets/tus.min.js"),
    ("OPTIONS", "/api/v1/uploads"),  # tus 1.0: what the server offers (versions, extensions, largest upload)
    ("GET", "/docs"),
    ("GET", "/host-key.pub"),
    ("GET", "/healthz"),
    ("GET", "/api/v1/competition"),
    ("GET", "/api/v1/partition"),
    ("GET", "/api/v1/leaderboard"),
    ("GET", "/leaderboard.csv"),
    ("GET", "/api/v1/leaderboard/reports/{submission_id}"),
}
#: Web forms check their CSRF token first (403), and /me sends an anonymous visitor to the sign-in page.
FORMS = {
    ("POST", "/signin"),
    ("POST", "/signout"),
    ("POST", "/me/finals"),
    ("POST", "/signup"),
    ("POST", "/signup/join"),
    ("POST", "/me/token"),
    ("POST", "/me/team/{action}"),
    ("POST", "/me/notify/{action}"),
}


pytestmark = [pytest.mark.board, pytest.mark.sqlite_only]


def _csrf(client: TestClient) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get("/signin").text)
    assert found is not None
    return found.group(1)


def test_every_route_but_the_public_ones_refuses_an_anonymous_caller(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    checked = 0
    for route in (
        r for module in (meta, participants, resumable, workers, leaderboard, web, signup, teams, notify, web_notify) for r in module.router.routes
    ):
        assert isinstance(route, APIRoute)
        for method in route.methods:
            if (method, route.path) in PUBLIC:
                continue
            url = re.sub(r"\{[^}]+\}", "x", route.path)
            world.ctx.limiter = FailureLimiter()  # each refusal counts as a failure; this test is not about the limit
            # A worker route hears the protocol version first (426 without it: test_worker_protocol.py); this one is right.
            protocol = {HEADER: str(WORKER_PROTOCOL)}
            response = client.request(method, url, params={"attempt": 1}, json={}, headers=protocol, follow_redirects=False)
            if (method, route.path) in FORMS:
                assert response.status_code == 403, (method, url)
            elif route.path == "/me":
                assert response.status_code == 303 and response.headers["location"] == "/signin"
            else:
                assert response.status_code == 401, (method, url, response.status_code)
                if not route.path.startswith("/me/"):  # a page asks to sign in; the API and /metrics for a bearer token
                    assert response.headers["www-authenticate"] == "Bearer"
            checked += 1
    assert checked >= 14  # the worker API, the participant API, /metrics and the web pages


def test_tokens_are_per_role(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    participant, metrics = world.tokens["alice"], new_metrics_token(world.ctx.db)
    public_key = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    worker = add_worker(world.ctx.db, "remote-1", public_key)  # a remote worker without a recorded key may not claim (403)

    def status(method: str, url: str, token: str) -> int:
        return client.request(method, url, headers={"Authorization": f"Bearer {token}", HEADER: str(WORKER_PROTOCOL)}, json={"wait_s": 0}).status_code

    assert status("GET", "/api/v1/submissions", participant) == 200
    assert status("GET", "/api/v1/worker/fingerprint", worker) == 200
    assert status("GET", "/metrics", metrics) == 200
    assert status("POST", "/api/v1/worker/claim", participant) == 401
    assert status("GET", "/api/v1/submissions", worker) == 401
    assert status("GET", "/api/v1/submissions", metrics) == 401
    assert status("GET", "/metrics", participant) == 401


def test_one_failure_limit_per_role_never_refusing_a_valid_token(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    metrics, alice = new_metrics_token(world.ctx.db), world.tokens["alice"]
    for _ in range(5):
        assert client.get("/api/v1/submissions", headers={"Authorization": "Bearer gp_wrong"}).status_code == 401
    for _ in range(5):
        assert client.post("/signin", data={"token": "gp_wrong", "csrf": _csrf(client)}).status_code == 401
    # ten participant failures from this address, API and sign-in page alike: a wrong participant token is 429 ...
    assert client.get("/api/v1/submissions", headers={"Authorization": "Bearer gp_wrong"}).status_code == 429
    assert client.post("/signin", data={"token": "gp_wrong", "csrf": _csrf(client)}).status_code == 429
    # ... a right one is served, and the scraper's bucket is its own
    assert client.get("/api/v1/submissions", headers={"Authorization": f"Bearer {alice}"}).status_code == 200
    assert client.post("/signin", data={"token": alice, "csrf": _csrf(client)}, follow_redirects=False).status_code == 303
    assert client.get("/metrics", headers={"Authorization": "Bearer gm_wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": f"Bearer {metrics}"}).status_code == 200


def test_revoking_a_token_ends_api_access_and_the_web_session(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    alice = {"Authorization": f"Bearer {world.tokens['alice']}"}
    signed = client.post("/signin", data={"token": world.tokens["alice"], "csrf": _csrf(client)}, follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == "/me"
    assert client.get("/me").status_code == 200 and client.get("/api/v1/submissions", headers=alice).status_code == 200
    revoke_participant(world.ctx.db, "alice")
    me = client.get("/me", follow_redirects=False)
    assert me.status_code == 303 and me.headers["location"] == "/signin"
    assert client.get("/api/v1/submissions", headers=alice).status_code == 401


def _sessions(db: Database, participant_id: int) -> int:
    """How many web session rows ``participant_id`` has."""
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(WebSession).where(WebSession.participant_id == participant_id)) or 0


def test_a_participant_keeps_the_newest_few_web_sessions(world: World) -> None:
    """Each sign-in stores a session row living 8 h: beyond the newest few per participant the oldest are ended (deleted)."""
    db = world.ctx.db
    with db.session() as session:
        alice, other = session.scalars(select(Participant).order_by(Participant.id).limit(2)).all()
        alice_id, other_id, fingerprint = alice.id, other.id, alice.token_sha256[:32]
    start_session(db, other_id)
    opened = [start_session(db, alice_id) for _ in range(SESSIONS_PER_PARTICIPANT + 3)]
    assert _sessions(db, alice_id) == SESSIONS_PER_PARTICIPANT
    assert all(by_session(db, alice_id, fingerprint, sid) is None for sid in opened[:3])  # the oldest: ended
    assert all(by_session(db, alice_id, fingerprint, sid) is not None for sid in opened[3:])
    assert _sessions(db, other_id) == 1  # another participant's session is not theirs to end


def test_an_ipv6_client_is_limited_by_its_64_whichever_of_its_addresses_it_uses(world: World) -> None:
    """40 addresses of one /64 (what one host may use at will) share one bucket; another /64 and IPv4 have their own."""
    app = create_app(world.ctx)
    wrong = {"Authorization": "Bearer gp_wrong"}
    codes = [TestClient(app, client=(f"2001:db8:1:2::{n:x}", 50000)).get("/api/v1/submissions", headers=wrong).status_code for n in range(1, 41)]
    assert codes[:10] == [401] * 10 and set(codes[10:]) == {429}
    assert TestClient(app, client=("2001:db8:1:3::1", 50000)).get("/api/v1/submissions", headers=wrong).status_code == 401
    assert TestClient(app, client=("192.0.2.7", 50000)).get("/api/v1/submissions", headers=wrong).status_code == 401
    assert client_bucket("2001:db8:1:2:aaaa:bbbb:cccc:dddd") == "2001:db8:1:2::/64"
    assert client_bucket("::ffff:192.0.2.7") == client_bucket("192.0.2.7") == "192.0.2.7"
    assert client_bucket("fe80::1%eth0") == "fe80::/64" and client_bucket("testclient") == "testclient"


def test_the_limiters_table_is_bounded_and_keeps_the_latest_buckets() -> None:
    limiter = FailureLimiter(max_failures=2, window_s=60, max_buckets=100)
    for n in range(5000):  # a spray of addresses, each failing once
        limiter.failed(f"participant 10.0.{n // 256}.{n % 256}")
    assert len(limiter) <= 100
    limiter.failed("participant 10.0.19.135")  # the latest buckets are kept: a second failure blocks
    assert limiter.blocked_for("participant 10.0.19.135") > 0
