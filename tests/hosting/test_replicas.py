"""A second opinion on an untrusted worker: with replicas = 2, a worker that alters a ranking or fakes a failure is caught.

One server app (real routes, SQLite, the scoring child process) per test. Workers are
local worker principals that state a fingerprint (bound to them) and claim through the worker route naming it,
put compact runs and post results through it. Honest workers put the same ranking (one
seeded generator: a deterministic grade); the liar permutes two hits of one query before
it puts them, or posts a failure code the honest workers do not see.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from grader.hosting.api.app import create_app
from grader.hosting.clock import utcnow
from grader.hosting.config import CompetitionFileError, load_competition
from grader.hosting.db.models import LogEntry, Replica, Result, Submission, Transition, Worker
from grader.hosting.identity.participants import rekey_local_worker
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.queue import lifecycle
from grader.hosting.results.grading_adapter import GradeOutcome
from grader.hosting.services import admin as admin_service
from grader.hosting.services.replication import fingerprint_digest
from grader.hosting.states import State
from grader.hosting.worker.fingerprint import worker_fingerprint
from grader.hosting.worker.loop import WorkerApi, _deliver
from grader.runs.compact import HEADER_BYTES
from grader.transparency.entries import decode_entry
from tests.hosting.leaderboard_world import make_world, post_runs, random_runs
from tests.hosting.support import admin, worker_headers, write_competition
from tests.hosting.world import World

pytestmark = pytest.mark.slow  # the server scores in a child process

FINGERPRINT = {
    "machine": "x86_64",
    "isa": ["avx2", "fma"],
    "cpu_flags_sha256": "a" * 64,
    "onnxruntime": "1.20.0",
    "execution_provider": "CPUExecutionProvider",
}
OTHER_CPU = {**FINGERPRINT, "isa": ["avx512f"], "cpu_flags_sha256": "b" * 64}
#: The seed of the honest workers' ranking: equal runs, as deterministic grades on one fingerprint are.
HONEST = 11


@dataclasses.dataclass
class Replicas:
    world: World
    client: TestClient
    tokens: dict[str, str]


@pytest.fixture
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    database = request.getfixturevalue("postgres_cluster").new_database() if getattr(request, "param", "sqlite") == "postgresql" else None
    world = make_world(tmp_path_factory.mktemp("replicas"), database)
    world.ctx.competition = world.competition = dataclasses.replace(world.ctx.competition, replicas=2)
    with world.ctx.db.session() as session:
        tokens = {name: rekey_local_worker(session, name) for name in ("w1", "w2", "w3", "w-other-cpu")}
    yield Replicas(world, TestClient(create_app(world.ctx)), tokens)
    world.ctx.db.dispose()


def _submit(r: Replicas, name: str, kind: str = "onnx") -> str:
    ctx = r.world.ctx
    with ctx.db.session() as session:
        pid = session.scalar(select(func.min(Submission.participant_id))) or 1
    submission = received_submission(
        submission_id=lifecycle.new_submission_id(),
        participant_id=pid,
        pin_id=ctx.pin_id,
        name=name,
        kind=kind,
        track="hidden",
        split="test",
        upload_path="none",
        upload_sha256="0" * 64,
        upload_bytes=1,
        content_digest="c" * 64,
        uploaded_at=utcnow(),
        attempt_limit=3,
        labels={"training": {"setting": "zero-shot", "datasets": []}},
    )
    with ctx.db.session() as session:
        lifecycle.record_received(session, submission)
    assert lifecycle.enqueue(ctx.db, ctx.dispatcher, submission.id, actor="test")
    return submission.id


def _claim(r: Replicas, worker: str, fingerprint: dict[str, Any] = FINGERPRINT) -> dict[str, Any] | None:
    """``worker`` states ``fingerprint`` (bound at the first statement; the same again changes nothing), then claims naming it."""
    headers = worker_headers(r.tokens[worker])
    stated = r.client.post("/api/v1/worker/fingerprint", json={"fingerprint": fingerprint}, headers=headers)
    assert stated.status_code == 200, stated.text
    answer = r.client.post("/api/v1/worker/claim", json={"wait_s": 0, "fingerprint": fingerprint_digest(fingerprint)}, headers=headers)
    assert answer.status_code in (200, 204), answer.text
    return None if answer.status_code == 204 else answer.json()  # type: ignore[no-any-return]


def _facts(r: Replicas, kind: str, failed: dict[str, str] | None = None) -> dict[str, Any]:
    key = r.world.ctx.blinding_key
    return {
        "subject": {"name": "replicated", "kind": "docker-image" if kind == "docker" else kind, "digest": {"sha256": "c" * 64}},
        "sandbox": {"kind": "docker", "blinding": key.report() if key else None},
        "labels": {"training": {"setting": "zero-shot", "datasets": []}},
        "started_at": "2026-12-02T10:00:00Z",
        "finished_at": "2026-12-02T10:01:00Z",
        "tasks": {t: {"failure": None if t not in (failed or {}) else {"code": failed[t], "message": "m"}} for t in r.world.ctx.tasks},
        "fingerprint": FINGERPRINT,
    }


def _swap_two_hits(_task: str, data: bytes) -> bytes:
    """The liar: the first query's first two hits change places (the score may not even move; the digest does)."""
    at = HEADER_BYTES + 8 * struct.unpack_from("<I", data, 12)[0]
    return data[:at] + data[at + 4 : at + 8] + data[at : at + 4] + data[at + 8 :]


def _grade(r: Replicas, worker: str, submission_id: str, expect: str, *, kind: str = "onnx", tamper: Any = None) -> None:
    """``worker`` claims ``submission_id`` and returns the honest ranking (or ``tamper``'s)."""
    job = _claim(r, worker)
    assert job is not None and job["submission_id"] == submission_id, (worker, job)
    as_worker = dataclasses.replace(r.world, worker_token=r.tokens[worker])
    post_runs(as_worker, r.client, submission_id, job["attempt"], _facts(r, kind), random.Random(HONEST), expect=expect, tamper=tamper)


def _state(r: Replicas, submission_id: str) -> Submission:
    with r.world.ctx.db.session() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        session.expunge(row)
        return row


def _verdicts(r: Replicas, submission_id: str) -> dict[str, str | None]:
    with r.world.ctx.db.session() as session:
        rows = session.scalars(select(Replica).where(Replica.submission_id == submission_id).order_by(Replica.attempt)).all()
        by_id = {w.id: w.name for w in session.scalars(select(Worker)).all()}
        return {by_id[row.worker_id]: row.verdict for row in rows if row.verdict != "rerun"}  # the replicas' votes


def _reruns(r: Replicas, submission_id: str) -> list[str]:
    """What each dissenter's re-run decided, in words (its row of the replicas table)."""
    with r.world.ctx.db.session() as session:
        rows = session.scalars(select(Replica).where(Replica.submission_id == submission_id, Replica.verdict == "rerun").order_by(Replica.id))
        return [str(row.detail["mismatch"]) for row in rows]


def _results(r: Replicas, submission_id: str) -> int:
    with r.world.ctx.db.session() as session:
        return session.scalar(select(func.count()).select_from(Result).where(Result.submission_id == submission_id)) or 0


def _audit(r: Replicas, submission_id: str) -> str:
    with r.world.ctx.db.session() as session:
        return "\n".join(session.scalars(select(Transition.reason).where(Transition.submission_id == submission_id).order_by(Transition.id)).all())


@pytest.mark.parametrize("setup", ["sqlite", "postgresql"], indirect=True)
def test_a_worker_that_alters_one_ranking_is_caught_and_the_honest_majority_accepted(setup: Replicas) -> None:
    r = setup
    sid = _submit(r, "altered")
    _grade(r, "w1", sid, "replicated")
    assert _state(r, sid).state is State.REPLICATING and _results(r, sid) == 0  # nothing scored on one worker's word
    assert _claim(r, "w1") is None  # never the second replica to the worker that did the first
    assert _claim(r, "w-other-cpu", OTHER_CPU) is None  # nor to a worker of another fingerprint
    _grade(r, "w2", sid, "replicated", tamper=_swap_two_hits)
    assert _state(r, sid).state is State.REPLICATING and _results(r, sid) == 0
    task = sorted(r.world.ctx.tasks)[0]
    assert f"worker w2 (attempt 2) and worker w1 (attempt 1) disagree on task {task}" in _audit(r, sid)
    _grade(r, "w3", sid, "replicated")  # two agree; before anything is accepted, the dissenter grades it again
    assert _state(r, sid).state is State.REPLICATING and _results(r, sid) == 0
    assert _verdicts(r, sid) == {"w1": "majority", "w2": "recheck", "w3": "majority"}
    assert "worker w2 grades it again" in _audit(r, sid)
    assert _claim(r, "w1") is None and _claim(r, "w3") is None  # the re-run is the dissenter's alone
    _grade(r, "w2", sid, "accepted", tamper=_swap_two_hits)  # the same runs again: the dissent stands
    assert _reruns(r, sid) == ["the re-run gave the outcome as the first run did: the dissent stands"]
    row = _state(r, sid)
    assert row.state is State.SCORED and _results(r, sid) == 1  # scored once, on the agreed runs
    assert _verdicts(r, sid) == {"w1": "majority", "w2": "dissent", "w3": "majority"}
    listed = {w.name: w for w in admin_service.worker_rows(r.world.ctx.db)}
    assert (listed["w2"].dissents, listed["w1"].dissents, listed["w3"].dissents) == (1, 0, 0)
    assert listed["w2"].fingerprint == listed["w1"].fingerprint is not None


def test_a_worker_that_fakes_a_failure_is_caught_and_nothing_is_charged_for_it(setup: Replicas) -> None:
    r = setup
    sid = _submit(r, "faked-failure")
    job = _claim(r, "w1")
    assert job is not None
    liar = r.client.post(
        f"/api/v1/worker/jobs/{sid}/result",
        json={"attempt": job["attempt"], "failure_code": "MODEL_ERROR", "message": "pretend"},
        headers=worker_headers(r.tokens["w1"]),
    )
    assert liar.json()["status"] == "replicated" and _state(r, sid).state is State.REPLICATING
    _grade(r, "w2", sid, "replicated")  # one against one: no majority yet
    assert "worker w2 (attempt 2) and worker w1 (attempt 1) disagree on failure code none / MODEL_ERROR" in _audit(r, sid)
    _grade(r, "w3", sid, "replicated")  # the dissenter, w1, grades it again first
    again = _claim(r, "w1")
    assert again is not None and again["submission_id"] == sid
    faked = r.client.post(
        f"/api/v1/worker/jobs/{sid}/result",
        json={"attempt": again["attempt"], "failure_code": "MODEL_ERROR", "message": "pretend"},
        headers=worker_headers(r.tokens["w1"]),
    )
    assert faked.json()["status"] == "accepted"  # the same failure again: the dissent stands, the majority's grade is scored
    assert _state(r, sid).state is State.SCORED and _state(r, sid).failure_code is None
    assert _verdicts(r, sid) == {"w1": "dissent", "w2": "majority", "w3": "majority"}
    flagged = [line for line in admin(r.world.state.root, "workers").splitlines() if "FLAGGED" in line]
    assert len(flagged) == 1 and flagged[0].startswith("w1 ") and "FLAGGED: 1 replica(s) disagreed with the majority" in flagged[0]


def test_a_worker_that_only_ran_out_of_time_is_outvoted_not_flagged(setup: Replicas) -> None:
    """A submission near its time limit may time out on one honest worker: outvoted, but nobody is flagged for it."""
    r = setup
    sid = _submit(r, "near-the-limit")
    job = _claim(r, "w1")
    assert job is not None
    facts = _facts(r, "onnx", failed={sorted(r.world.ctx.tasks)[0]: "TIMEOUT"})
    as_w1 = dataclasses.replace(r.world, worker_token=r.tokens["w1"])
    # the timed-out task has no run; the other tasks' runs are the honest ones (one generator state per task list)
    runs = random_runs(r.world, random.Random(HONEST))
    headers = worker_headers(as_w1.worker_token)
    digests = {}
    for task, data in runs.items():
        if task in facts["tasks"] and facts["tasks"][task]["failure"] is None:
            assert (
                r.client.put(f"/api/v1/worker/jobs/{sid}/runs/{task}", params={"attempt": job["attempt"]}, content=data, headers=headers).status_code
                == 200
            )
            digests[task] = hashlib.sha256(data).hexdigest()
    answer = r.client.post(f"/api/v1/worker/jobs/{sid}/result", json={"attempt": job["attempt"], "facts": facts, "runs": digests}, headers=headers)
    assert answer.json()["status"] == "replicated", answer.text
    _grade(r, "w2", sid, "replicated")
    _grade(r, "w3", sid, "accepted")
    assert _verdicts(r, sid) == {"w1": "outvoted", "w2": "majority", "w3": "majority"}
    assert {w.name: w.dissents for w in admin_service.worker_rows(r.world.ctx.db)}["w1"] == 0


def test_two_agreeing_workers_suffice_and_a_lost_replica_waits_for_its_fingerprint(setup: Replicas) -> None:
    r = setup
    sid = _submit(r, "agreed")
    _grade(r, "w1", sid, "replicated")
    assert _claim(r, "w2") is not None
    with r.world.ctx.db.session() as session:  # w2's lease runs out (its machine died)
        session.execute(update(Submission).where(Submission.id == sid).values(lease_expires_at=utcnow()))
    lifecycle.reap(r.world.ctx.db, r.world.ctx.dispatcher, redispatch_s=30)
    assert _state(r, sid).state is State.REPLICATING  # back to the replicas' fingerprint, not to the open queue
    assert _claim(r, "w1") is None
    _grade(r, "w3", sid, "accepted")
    assert _results(r, sid) == 1 and _verdicts(r, sid) == {"w1": "majority", "w3": "majority"}


def test_a_result_naming_another_fingerprint_than_the_bound_one_is_not_counted(setup: Replicas) -> None:
    """The vote pairs on the fingerprint bound to the worker: a result whose facts name another is retried, not counted."""
    r = setup
    sid = _submit(r, "other-facts")
    job = _claim(r, "w1")
    assert job is not None
    as_w1 = dataclasses.replace(r.world, worker_token=r.tokens["w1"])
    facts = {**_facts(r, "onnx"), "fingerprint": OTHER_CPU}
    post_runs(as_w1, r.client, sid, job["attempt"], facts, random.Random(HONEST), expect="requeued")
    assert _verdicts(r, sid) == {} and "the result's fingerprint is not the one bound to the worker" in _audit(r, sid)


def test_a_job_left_replicating_when_the_setting_is_lowered_to_one_is_graded_by_any_worker(setup: Replicas) -> None:
    r = setup
    sid = _submit(r, "lowered")
    _grade(r, "w1", sid, "replicated")
    r.world.ctx.competition = r.world.competition = dataclasses.replace(r.world.ctx.competition, replicas=1)  # the host edited the file and restarted
    job = _claim(r, "w-other-cpu", OTHER_CPU)
    assert job is not None and job["submission_id"] == sid
    as_worker = dataclasses.replace(r.world, worker_token=r.tokens["w-other-cpu"])
    post_runs(as_worker, r.client, sid, job["attempt"], _facts(r, "onnx"), random.Random(HONEST), expect="accepted")
    assert _state(r, sid).state is State.SCORED


@pytest.mark.filterwarnings("ignore:You should not use the 'timeout' argument with the TestClient")  # the worker's own timeouts
def test_the_worker_code_states_its_fingerprint_once_and_is_paired_by_it(setup: Replicas, tmp_path: Path) -> None:
    """The real worker's client (state this machine's fingerprint, claim naming it, put the runs, post): two such workers agree."""
    r = setup
    sid = _submit(r, "worker-code")
    facts = {key: value for key, value in _facts(r, "onnx").items() if key != "fingerprint"}  # the worker adds its own
    runs = {}
    for task, data in random_runs(r.world, random.Random(HONEST)).items():
        runs[task] = tmp_path / f"{task}.run"
        runs[task].write_bytes(data)
    for worker, expect in (("w1", "replicated"), ("w2", "accepted")):
        api = WorkerApi("http://testserver", r.tokens[worker])
        api.http = TestClient(create_app(r.world.ctx), headers=worker_headers(r.tokens[worker]))
        job = api.claim(wait_s=0)
        assert job is not None and job.submission_id == sid
        assert _claim(r, "w-other-cpu", OTHER_CPU) is None
        assert api.post_result(sid, _deliver(api, sid, job.attempt, GradeOutcome(facts=facts, runs=runs))) == expect
    assert _verdicts(r, sid) == {"w1": "majority", "w2": "majority"} and _results(r, sid) == 1
    listed = {w.name: w for w in admin_service.worker_rows(r.world.ctx.db)}
    assert listed["w1"].fingerprint == fingerprint_digest(worker_fingerprint())


def test_a_docker_submission_is_not_replicated(setup: Replicas) -> None:
    r = setup
    sid = _submit(r, "container", kind="docker")
    _grade(r, "w1", sid, "accepted", kind="docker")
    assert _state(r, sid).state is State.SCORED and _verdicts(r, sid) == {}


@pytest.mark.parametrize(("value", "ok"), [(1, True), (2, True), (0, False), (4, False)])
def test_the_replicas_setting_is_validated(tmp_path: Any, value: int, ok: bool) -> None:
    path = write_competition(tmp_path / "c.toml", replicas=value)
    if ok:
        assert load_competition(path).replicas == value
    else:
        with pytest.raises(CompetitionFileError, match="replicas"):
            load_competition(path)


def test_replicas_that_never_agree_end_error_and_the_outcome_is_logged(setup: Replicas) -> None:
    """No 2 of 3 replicas agree: the job ends ``error`` with no report signed, and the log says so (it has every outcome)."""
    r = setup
    submission_id = _submit(r, "undecided")
    _grade(r, "w1", submission_id, "replicated")
    _grade(r, "w2", submission_id, "replicated", tamper=_swap_two_hits)
    job = _claim(r, "w3")
    assert job is not None and job["submission_id"] == submission_id
    as_worker = dataclasses.replace(r.world, worker_token=r.tokens["w3"])
    post_runs(as_worker, r.client, submission_id, job["attempt"], _facts(r, "onnx"), random.Random(HONEST + 1), expect="error")
    assert _state(r, submission_id).state == State.ERROR
    with r.world.ctx.db.session() as session:
        logged = [decode_entry(bytes(e)) for e in session.scalars(select(LogEntry.entry).where(LogEntry.submission_id == submission_id)).all()]
    assert [(e["kind"], e["status"], e["failure_code"]) for e in logged] == [("outcome", "error", "INFRA")]


@pytest.mark.parametrize("second", ["the majority's runs", "a third ranking"])
def test_a_dissenter_whose_re_run_differs_from_its_first_ends_nondeterministic_flags_no_one_charges_nothing(setup: Replicas, second: str) -> None:
    """A model that is not deterministic (or a worker that lied once): two outputs for one input, so no one is flagged."""
    r = setup
    sid = _submit(r, "two-outputs")
    _grade(r, "w1", sid, "replicated")
    _grade(r, "w2", sid, "replicated", tamper=_swap_two_hits)
    _grade(r, "w3", sid, "replicated")
    _grade(r, "w2", sid, "error", tamper=None if second == "the majority's runs" else _swap_last_two_hits)
    row = _state(r, sid)
    assert (row.state, row.failure_code, _results(r, sid)) == (State.ERROR, "NONDETERMINISTIC", 0)  # error: never charged
    said = "the majority's" if second == "the majority's runs" else "a third"
    assert _reruns(r, sid) == [f"the re-run gave {said} the outcome where the first run did not: two outputs for one input"]
    assert _verdicts(r, sid) == {"w1": "majority", "w2": "nondeterministic", "w3": "majority"}
    listed = {w.name: w for w in admin_service.worker_rows(r.world.ctx.db)}
    assert [listed[name].dissents for name in ("w1", "w2", "w3")] == [0, 0, 0]  # no one flagged
    assert listed["w2"].nondeterministic == 1  # but the host sees whose re-run gave two outputs
    with r.world.ctx.db.session() as session:  # the end of the grade is in the log, with its code
        logged = [decode_entry(bytes(e)) for e in session.scalars(select(LogEntry.entry).where(LogEntry.submission_id == sid)).all()]
    assert [(e["kind"], e["status"], e["failure_code"]) for e in logged] == [("outcome", "error", "NONDETERMINISTIC")]
    assert sum(1 for reason in _audit(r, sid).splitlines() if "two outputs for one input" in reason) == 1


def _swap_last_two_hits(_task: str, data: bytes) -> bytes:
    """Another lie: the last query's last two hits change places."""
    return data[:-8] + data[-4:] + data[-8:-4]
