"""Isolation between the competitions of one server (issue 33 item 4), replayed through a real two-competition server.

`grader serve --competitions DIR` with alpha and beta over real sockets, no local workers, no Docker (a submission
stays queued; the one worker here is a real :class:`ManyWorker` that claims it):

* a participant of alpha gets from beta, for alpha's submission, the very 404 a submission that exists nowhere gets
  (status and body), on every route that takes a submission id; and cannot submit there;
* alpha's host key, partition secret, blinding key and log serve alpha alone: the end of alpha publishes its secret
  and blinding key, never beta's, and beta's log does not move;
* a worker's job of alpha is never graded on beta's data copy, even one put where alpha's should be.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader.hosting.keyring.worker_signing import ensure_worker_key
from grader.hosting.participant.client import HostingClient
from grader.hosting.protocol.messages import Job
from grader.hosting.worker.hygiene import data_mismatch
from grader.hosting.worker.many_loop import ManyWorker, _grade
from tests.hosting.support import REPO, ManyServer, admin, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: An id of the server's form that no submission has, in either competition.
NOWHERE = "s" + "0" * 16


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManyServer]:
    root = tmp_path_factory.mktemp("isolation")
    files = root / "competitions"
    files.mkdir()
    for name in ("alpha", "beta"):
        write_competition(files / f"{name}.toml", name=name, tables={"queue": {"lease_s": 600, "heartbeat_s": 30}})
    server = ManyServer(files, root / "state", workers=0).start()
    carol = admin(server.state, "person", "add", "carol").strip()  # one person, registered in both
    for name in ("alpha", "beta"):
        admin(server.state, "--in", name, "add-participant", "carol")
    server.tokens = {  # type: ignore[attr-defined]
        "alice": admin(server.state, "--in", "alpha", "add-participant", "alice").strip(),
        "bob": admin(server.state, "--in", "beta", "add-participant", "bob").strip(),
        "carol": carol,
    }
    server.root = root  # type: ignore[attr-defined]
    server.submitted = HostingClient(server.base("alpha"), server.tokens["alice"]).submit(EXAMPLE)["id"]  # type: ignore[attr-defined]
    yield server
    server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def answer(response: httpx.Response) -> tuple[int, bytes]:
    return response.status_code, response.content


#: Every route that takes a submission id, as a participant (or anyone, for a board's report) reaches it.
ID_ROUTES = (
    "/api/v1/submissions/{id}",
    "/api/v1/submissions/{id}/report",
    "/api/v1/submissions/{id}/logs",
    "/api/v1/submissions/{id}/report.tlog-proof",
    "/api/v1/leaderboard/reports/{id}",
)


def test_a_participant_of_one_competition_learns_nothing_of_the_others_submissions(two: ManyServer) -> None:
    tokens: dict[str, str] = two.tokens  # type: ignore[attr-defined]
    alphas: str = two.submitted  # type: ignore[attr-defined]
    http = httpx.Client(timeout=30)  # one connection for the sixty-odd reads
    for who in ("alice", "carol", "bob"):  # alice: of alpha alone; carol: of both; bob: of beta alone
        for base in (two.base("beta"), f"{two.url}/api/v1/competitions/beta"):
            for route in ID_ROUTES:
                if "/api/v1/competitions/" in base:  # the API alias: /api/v1/competitions/<name>/<route>
                    route = route.removeprefix("/api/v1")
                exists = http.get(base + route.format(id=alphas), headers=bearer(tokens[who]))
                nowhere = http.get(base + route.format(id=NOWHERE), headers=bearer(tokens[who]))
                assert exists.status_code == 404 and answer(exists) == answer(nowhere), (who, base, route, exists.text)
        # a final choice names it: refused as one that exists nowhere
        finals = [
            http.put(f"{two.base('beta')}/api/v1/finals", json={"submissions": [sid]}, headers=bearer(tokens[who])) for sid in (alphas, NOWHERE)
        ]
        assert finals[0].status_code == 404 and answer(finals[0]) == answer(finals[1]), who
        # the web page's report link (no session: the same answer for both)
        page = [http.get(f"{two.base('beta')}/me/submissions/{sid}/report", follow_redirects=False) for sid in (alphas, NOWHERE)]
        assert answer(page[0]) == answer(page[1]), who
    # signed in at beta's pages, a participant of both: the page's report link answers alike too
    with httpx.Client(base_url=two.url, timeout=30) as browser:
        csrf = re.search(r'name="csrf" value="([^"]+)"', browser.get("/c/beta/signin").text)
        assert csrf is not None
        assert browser.post("/c/beta/signin", data={"csrf": csrf.group(1), "token": tokens["carol"]}).status_code == 303
        assert browser.get("/c/beta/me").status_code == 200
        signed = [browser.get(f"/c/beta/me/submissions/{sid}/report", follow_redirects=False) for sid in (alphas, NOWHERE)]
        assert signed[0].status_code == 404 and answer(signed[0]) == answer(signed[1])
    # the list of a participant of both holds beta's submissions only
    listed = http.get(f"{two.base('beta')}/api/v1/submissions", headers=bearer(tokens["carol"]))
    assert listed.status_code == 200 and listed.json() == []
    # and the one who submitted it sees it in alpha
    assert http.get(f"{two.base('alpha')}/api/v1/submissions/{alphas}", headers=bearer(tokens["alice"])).status_code == 200
    http.close()


def test_a_participant_of_one_competition_cannot_submit_to_the_other(two: ManyServer) -> None:
    tokens: dict[str, str] = two.tokens  # type: ignore[attr-defined]
    beta_log = httpx.get(f"{two.base('beta')}/log/checkpoint", timeout=30).text
    body = b"\0" * 4096  # refused at the token, before the body is read: its bytes do not matter
    for competition, who in (("beta", "alice"), ("alpha", "bob")):
        sent = httpx.post(
            f"{two.base(competition)}/api/v1/submissions",
            content=body,
            headers={**bearer(tokens[who]), "Content-Type": "application/gzip"},
            timeout=60,
        )
        assert sent.status_code == 404 and "not registered in this competition" in sent.json()["detail"], (competition, who, sent.text)
        quota = httpx.get(f"{two.base(competition)}/api/v1/quota", headers=bearer(tokens[who]), timeout=30)
        assert quota.status_code == 404, (competition, who)
    # nothing of it reached beta: its log holds no receipt, a participant of beta lists nothing
    assert httpx.get(f"{two.base('beta')}/log/checkpoint", timeout=30).text.splitlines()[:2] == beta_log.splitlines()[:2]
    assert httpx.get(f"{two.base('beta')}/api/v1/submissions", headers=bearer(tokens["bob"]), timeout=30).json() == []


def worker_of(server: ManyServer, keys: Path) -> str:
    """A remote worker registered in alpha and beta under one token, with its key."""
    ensure_worker_key(keys)
    public = str(keys / "grader.pub")
    token = admin(server.state, "--in", "alpha", "add-worker", "w", "--public-key", public).strip()
    os.environ["GRADER_WORKER_TOKEN"] = token
    try:
        admin(server.state, "--in", "beta", "add-worker", "w", "--public-key", public, "--same-token")
    finally:
        del os.environ["GRADER_WORKER_TOKEN"]
    return token


def test_a_job_of_one_competition_is_never_graded_on_the_others_copy(two: ManyServer, tmp_path: Path) -> None:
    copies, swapped = tmp_path / "copies", tmp_path / "swapped"
    for name in ("alpha", "beta"):
        admin(two.state, "--in", name, "export-worker-data", "--out", str(copies / name))
    keys = tmp_path / "keys"
    token = worker_of(two, keys)
    worker = ManyWorker(two.url, token, copies, names=["alpha"], key=ensure_worker_key(keys))
    job: Job | None = None
    try:
        worker.refresh()
        fingerprint = worker.fingerprint()
        for _ in range(10):
            job = worker.claim(fingerprint, wait_s=10)
            if job is not None:
                break
        assert job is not None and (job.competition, job.submission_id) == ("alpha", two.submitted)  # type: ignore[attr-defined]
        # the job's pin admits alpha's copy and refuses beta's (pseudonyms under another blinding key)
        assert data_mismatch(job, copies / "alpha") is None
        refused = data_mismatch(job, copies / "beta")
        assert refused is not None and "pinned" in refused, refused
        # beta's copy where alpha's should be: the real grading path refuses it before anything is staged or run
        shutil.copytree(copies / "beta", swapped / "alpha")
        worker.data = swapped
        worker.served["alpha"].data = swapped / "alpha"
        with pytest.raises(SystemExit, match="do not match the competitions' pins"):
            _grade(worker, job)
        assert worker.unfit == {"alpha"} and worker.served == {}
    finally:
        worker.http.close()
    # the attempt was reported a failure of this worker's data (INFRA), not a grade: the submission is not scored
    view: dict[str, Any] = httpx.get(
        f"{two.base('alpha')}/api/v1/submissions/{job.submission_id}",
        headers=bearer(two.tokens["alice"]),  # type: ignore[attr-defined]
        timeout=30,
    ).json()
    assert view["state"] != "scored" and view.get("score") is None, view


def test_one_competitions_keys_secret_and_log_serve_it_alone(two: ManyServer) -> None:
    def of(name: str, path: str) -> httpx.Response:
        return httpx.get(f"{two.base(name)}{path}", timeout=30)

    alpha, beta = of("alpha", "/api/v1/partition").json(), of("beta", "/api/v1/partition").json()
    assert alpha["commitment"] != beta["commitment"] and alpha["secret"] is None and beta["secret"] is None
    assert alpha["blinding"]["key_id"] != beta["blinding"]["key_id"] and alpha["blinding"]["key"] is None is beta["blinding"]["key"]
    assert of("alpha", "/host-key.pub").content != of("beta", "/host-key.pub").content
    assert of("alpha", "/log/key").text != of("beta", "/log/key").text
    beta_log = of("beta", "/log/checkpoint").text
    admin(two.state, "--in", "alpha", "end", "--yes")
    ended = of("alpha", "/api/v1/partition").json()
    assert ended["ended"] and ended["secret"] is not None and ended["blinding"]["key"] is not None
    assert hashlib.sha256(bytes.fromhex(ended["secret"])).hexdigest() == alpha["commitment"]  # alpha's own secret
    still = of("beta", "/api/v1/partition").json()
    assert not still["ended"] and still["secret"] is None and still["blinding"]["key"] is None and still == beta
    # neither of alpha's published keys opens beta's commitment or is beta's blinding key
    assert hashlib.sha256(bytes.fromhex(ended["secret"])).hexdigest() != beta["commitment"]
    assert ended["blinding"]["key_id"] != beta["blinding"]["key_id"]
    assert of("beta", "/log/checkpoint").text.splitlines()[:2] == beta_log.splitlines()[:2]  # beta's log did not move
    assert of("alpha", "/log/checkpoint").text.splitlines()[0] == "grader-log/alpha"
