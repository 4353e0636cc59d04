"""The pieces of a safe upload, without a server: what the headers must declare, the client's retry bounds,
the unpack ratio (at intake and again on the worker), and the competition keys that set them."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zlib
from pathlib import Path

import httpx
import pytest

from grader.errors import SubmissionError
from grader.failures import FailureCode
from grader.hosting.config import load_competition
from grader.hosting.errors import ClientError, CompetitionFileError, RefusedSubmission
from grader.hosting.intake.upload_checks import check_submission
from grader.hosting.intake.uploads import read_head
from grader.hosting.participant.retry import RetryPolicy, in_progress_wait, send_while_in_progress, send_with_retry, upload_identity
from grader.hosting.protocol.messages import Job
from grader.hosting.results.grading_adapter import GradeRequest, grade_upload
from grader.sandbox.limits import SandboxLimits
from grader.submissions.archive import MIN_UNPACK_ALLOWANCE, unpack_limits

BASE = 'name = "c"\nbenchmark = "mini"\nstart = 2026-01-01T00:00:00Z\nend = 2027-01-01T00:00:00Z\n'
DIGEST = "sha-256=:" + base64.b64encode(hashlib.sha256(b"body").digest()).decode() + ":"


def bomb(path: Path, unpacked: int = 32 << 20) -> Path:
    """A .tar.gz holding a manifest and ``unpacked`` zero bytes: a few tens of kilobytes."""
    manifest = b'{"kind": "onnx", "name": "bomb"}'
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = io.BytesIO()
    for name, size in (("submission.json", len(manifest)), ("model.onnx", unpacked)):
        info = tarfile.TarInfo(name)
        info.size = size
        out.write(packer.compress(info.tobuf(format=tarfile.PAX_FORMAT)))
        if name == "submission.json":
            out.write(packer.compress(manifest + b"\0" * (-len(manifest) % 512)))
        else:
            for _ in range(size >> 20):
                out.write(packer.compress(b"\0" * (1 << 20)))
    out.write(packer.compress(b"\0" * 1024))
    out.write(packer.flush())
    path.write_bytes(out.getvalue())
    return path


def test_unpack_limits_ratio_floor_and_cap() -> None:
    assert unpack_limits(10 << 20, ratio=20, cap=4 << 30).max_total_bytes == 200 << 20
    assert unpack_limits(1000, ratio=20, cap=4 << 30).max_total_bytes == MIN_UNPACK_ALLOWANCE  # a tiny archive of text
    assert unpack_limits(1 << 30, ratio=20, cap=4 << 30).max_total_bytes == 4 << 30


def test_intake_refuses_a_bomb_at_the_ratio(tmp_path: Path) -> None:
    archive = bomb(tmp_path / "bomb.tar.gz")
    limits = unpack_limits(archive.stat().st_size, ratio=20, cap=4 << 30)
    with pytest.raises(SubmissionError, match="unpacks to more than"):
        check_submission(archive, limits=limits)


def test_worker_unpacks_again_within_the_ratio(tmp_path: Path) -> None:
    archive = bomb(tmp_path / "bomb.tar.gz")
    request = GradeRequest(benchmark="mini", tasks=["text2code"], split="test", limits=SandboxLimits(), max_unpack_ratio=20)
    outcome = grade_upload(archive, request, tmp_path / "work")
    assert outcome.facts is None and outcome.failure_code is not None and outcome.failure_code is not FailureCode.INFRA  # charged
    assert "unpacks to more than" in outcome.message


def test_a_job_from_an_older_server_gets_the_default_bounds() -> None:
    fields = {
        "submission_id": "s1",
        "competition": "c",  # worker protocol 3 names it; the bounds below are what an older server left out
        "attempt": 1,
        "lease_expires_at": None,
        "lease_s": 60,
        "heartbeat_s": 10,
        "upload_sha256": "0" * 64,
        "benchmark": "mini",
        "tasks": [],
        "split": "test",
        "track": "hidden",
        "limits": {},
        "data_digests": {},
    }
    job = Job.model_validate(fields)
    assert job.max_unpack_ratio == 20 and job.max_unpacked_bytes == 4 << 30


def test_competition_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(BASE + '[upload]\nmax_unpack_ratio = 8\nmax_unpacked_bytes = "1g"\nreservation_s = 30\nstall_s = 5\n', encoding="utf-8")
    unpack = load_competition(path).unpack
    assert (unpack.max_unpack_ratio, unpack.max_unpacked_bytes, unpack.reservation_s, unpack.stall_s) == (8, 1 << 30, 30, 5)
    path.write_text(BASE, encoding="utf-8")
    assert (load_competition(path).unpack.max_unpack_ratio, load_competition(path).unpack.stall_s) == (20, 10)
    for stall in ("1", "30"):  # under the refresh's two periods; not shorter than the reservation
        path.write_text(BASE + f"[upload]\nreservation_s = 30\nstall_s = {stall}\n", encoding="utf-8")
        with pytest.raises(CompetitionFileError, match="upload.stall_s"):
            load_competition(path)
    path.write_text(BASE + "[upload]\nmax_unpack_ratio = 0.5\n", encoding="utf-8")
    with pytest.raises(CompetitionFileError, match="upload.max_unpack_ratio"):
        load_competition(path)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 411),
        ({"content-length": "12x"}, 400),
        ({"content-length": str(2 << 20)}, 413),
        ({"content-length": "4", "idempotency-key": "k" * 32}, 400),  # a key names one body: its digest is required
        ({"content-length": "4", "idempotency-key": "short", "content-digest": DIGEST}, 400),
        ({"content-length": "4", "idempotency-key": "k" * 32, "content-digest": "sha-256=:AAAA:"}, 400),
        ({"content-length": "4", "idempotency-key": "k" * 32, "content-digest": "md5=:AAAA:"}, 400),
    ],
)
def test_upload_head_refusals(headers: dict[str, str], status: int) -> None:
    with pytest.raises(RefusedSubmission) as refused:
        read_head(headers, 1 << 20)
    assert refused.value.status == status


def test_upload_head_accepted() -> None:
    head = read_head({"content-length": "4", "idempotency-key": "k" * 32, "content-digest": DIGEST}, 1 << 20)
    assert (head.declared_bytes, head.key, head.keyed, head.body_sha256) == (4, "k" * 32, True, hashlib.sha256(b"body").hexdigest())
    anonymous = read_head({"content-length": "4"}, 1 << 20)
    assert not anonymous.keyed and anonymous.body_sha256 is None and len(anonymous.key) == 32


def test_upload_identity_is_fresh_per_upload_and_names_the_body(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"body")
    first, second = upload_identity(archive), upload_identity(archive)
    assert first["Content-Digest"] == second["Content-Digest"] == DIGEST
    assert first["Idempotency-Key"] != second["Idempotency-Key"] and len(first["Idempotency-Key"]) == 32  # 128 random bits


REQUEST = httpx.Request("POST", "http://server/api/v1/submissions")


def test_retries_end_within_the_budget_when_nothing_answers() -> None:
    tries, waits = [], []

    def refused() -> httpx.Response:
        tries.append(1)
        raise httpx.ConnectError("connection refused", request=REQUEST)

    policy = RetryPolicy()
    with pytest.raises(httpx.ConnectError):
        send_with_retry(refused, policy, sleep=waits.append)
    assert 1 < len(tries) <= policy.attempts and sum(waits) <= policy.budget_s
    assert waits == sorted(waits) or len(waits) <= 2  # backoff grows (jitter aside)


def test_retries_a_broken_connection_and_a_gateway_error_but_not_a_refusal() -> None:
    answers: list[Exception | httpx.Response] = [
        httpx.RemoteProtocolError("Server disconnected without sending a response.", request=REQUEST),
        httpx.Response(503, request=REQUEST),
        httpx.Response(201, request=REQUEST),
    ]

    def send() -> httpx.Response:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    heard: list[str] = []
    assert send_with_retry(send, RetryPolicy(), sleep=lambda _s: None, on_retry=lambda what, _s: heard.append(what)).status_code == 201
    assert len(heard) == 2 and "Server disconnected" in heard[0]
    answers[:] = [httpx.Response(429, request=REQUEST), httpx.Response(201, request=REQUEST)]
    assert send_with_retry(send, RetryPolicy(), sleep=lambda _s: None).status_code == 429  # a refusal is an answer


def in_progress(retry_after: str = "4") -> httpx.Response:
    """The server's 409 while another copy under the key is arriving."""
    return httpx.Response(409, request=REQUEST, headers={"Retry-After": retry_after}, json={"detail": "still arriving", "in_progress": True})


def test_only_the_marked_409_is_waited_for_and_for_its_retry_after() -> None:
    assert in_progress_wait(in_progress("4")) == 4 and in_progress_wait(in_progress("0")) == 1
    assert in_progress_wait(httpx.Response(409, request=REQUEST, json={"detail": "this Idempotency-Key was used for another upload"})) is None
    assert in_progress_wait(httpx.Response(429, request=REQUEST, headers={"Retry-After": "4"}, json={"in_progress": True})) is None
    answers = [in_progress("4"), in_progress("3"), httpx.Response(200, request=REQUEST, json={"id": "s1"})]
    waits: list[float] = []
    heard: list[tuple[float, float, float]] = []
    response = send_while_in_progress(lambda: answers.pop(0), RetryPolicy(), on_wait=lambda *w: heard.append(w), sleep=waits.append)
    assert response.status_code == 200 and waits == [4, 3]
    assert heard == [(4, 0, 60), (3, 4, 60)]  # the wait, the time waited so far, the bound: shown on the terminal


def test_waiting_for_a_copy_in_progress_is_bounded_beyond_the_connection_budget() -> None:
    policy = RetryPolicy()
    assert policy.in_progress_s > policy.budget_s + 10  # outlasts the server's default stall_s (10 s)
    tries, waits = [], []

    def still() -> httpx.Response:
        tries.append(1)
        return in_progress("10")

    with pytest.raises(ClientError, match=r"still receiving another copy of this upload after 60 s.*grader submissions"):
        send_while_in_progress(still, policy, sleep=waits.append)
    assert sum(waits) == 60 and len(tries) == 7
