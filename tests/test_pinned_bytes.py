"""The bytes of one fixed grade, pinned: ``report.json`` and what the hosting layer makes of it.

One fixed submission (``submissions_example/onnx-lsa``) graded on the bundled ``mini`` benchmark, in-process
with one encoding thread, must give a ``report.json`` identical, byte for byte, to the committed
``tests/data/pinned_grade/report.json``, whose SHA-256 is pinned below. The hosting layer, with a host key
and a partition secret derived from fixed seeds, must turn that report into a host-signed full report and a
public-part report (the one a participant downloads before the end) whose bytes are pinned too.

This pins behaviour, not code: a refactor of grading, reports or hosting must leave all four digests as
they are. A change that alters them on purpose updates the pins in the same commit and says why.

What is normalised, and why (nothing else is): ``started_at`` and ``finished_at`` of the grade are the wall
clock of the run. Each is replaced by :data:`FIXED_TIME` in the bytes, and the report handed to the host is
the normalised one, so everything downstream (signatures included: Ed25519 is deterministic) is fixed.
The grade records no host name or path; if one appeared, the first test would fail, as it should.
What a grade cost (seconds, CPU, memory, energy) varies between re-grades and lives in one block, ``cost``,
which is dropped here by name (:data:`VARYING_BLOCK`) before the bytes are compared: the one other exception.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from grader import jsonio
from grader.cli.main import cli
from grader.hosting.clock import utcnow
from grader.hosting.config import load_competition
from grader.hosting.db.models import Result, Submission, Worker
from grader.hosting.identity.participants import create_participant, rekey_local_worker
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.leaderboard.parts import acceptance_scorer
from grader.hosting.leaderboard.service import report_envelope
from grader.hosting.queue import lifecycle
from grader.hosting.server import ServeOptions, prepare
from grader.reports.keys import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME, public_key_pem
from grader.reports.model import report_json
from tests.hosting.posting import accept_posted
from tests.hosting.support import write_competition

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
PINNED_REPORT = REPO / "tests" / "data" / "pinned_grade" / "report.json"

#: sha256 of the grade's report.json, timestamps normalised (= of PINNED_REPORT).
GRADE_REPORT_SHA256 = "39ebc3857f976a1fd6f67203b77807302b2cc9a1b692daf9e60845495de296f7"
#: sha256 of the report.json the host writes beside its signed envelope of the full report.
HOST_REPORT_SHA256 = "81f785a6904b82ca07a544fada3c978543cd3f3f01b382079eed6356d99facfb"
#: sha256 of the public-part report.json the host writes, and of the signed envelope a participant downloads.
PUBLIC_REPORT_SHA256 = "6da6279021d7a5514c1e42e8e4a0d6f29a244e54750debe4f15c177d647989d4"
PUBLIC_ENVELOPE_SHA256 = "d65a9a7feaf280d1caeaa336a950688774a4fa478e88eea3027743f93e691e49"

FIXED_TIME = b"2000-01-01T00:00:00Z"
_TIMESTAMP = re.compile(rb'^(  "(?:started_at|finished_at)": ")[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z(",?)$', re.M)
HOST_KEY_SEED = hashlib.sha256(b"grader pinned bytes: host key").digest()
PARTITION_SECRET = hashlib.sha256(b"grader pinned bytes: partition secret").digest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: The report's one block whose values vary between re-grades by design (docs/reports.md, The cost block).
VARYING_BLOCK = "cost"


def without_cost(raw: bytes) -> bytes:
    """``raw`` (a report file's bytes) without its :data:`VARYING_BLOCK`, written again as the grader writes reports."""
    report = jsonio.loads(raw)
    assert VARYING_BLOCK in report, "a grade's report carries its cost block"
    del report[VARYING_BLOCK]
    return report_json(report)


def normalized(raw: bytes) -> bytes:
    """``raw`` with the two top-level wall-clock timestamps replaced by :data:`FIXED_TIME`; each must occur once."""
    text, count = _TIMESTAMP.subn(lambda m: m.group(1) + FIXED_TIME + m.group(2), raw)
    assert count == 2, f"expected started_at and finished_at once each at the top level, replaced {count}"
    return text


def assert_pinned(data: bytes, pinned: str, what: str, keep: Path) -> None:
    """``data`` hashes to ``pinned``; otherwise the new bytes are kept at ``keep`` for a diff."""
    if sha256(data) != pinned:
        keep.write_bytes(data)
        pytest.fail(f"{what}: sha256 {sha256(data)} != pinned {pinned}; the bytes are in {keep}")


@pytest.mark.slow
def test_grade_report_bytes_are_pinned(tmp_path: Path) -> None:
    # In-process (one encoding child process): one thread, so the embeddings and thus every measure are fixed.
    out = tmp_path / "out"
    args = ["run", str(EXAMPLE), "--benchmark", "mini", "--sandbox", "none", "--threads", "1", "--quiet", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    graded = normalized(without_cost((out / "report.json").read_bytes()))
    assert_pinned(graded, GRADE_REPORT_SHA256, "report.json of the grade", tmp_path / "report.json")
    assert graded == PINNED_REPORT.read_bytes()


def _host_state(root: Path) -> Path:
    """A state folder whose host key and partition secret come from fixed seeds (``grader serve`` would make random ones)."""
    keys = root / "keys"
    keys.mkdir(parents=True)
    os.chmod(keys, 0o700)
    key = Ed25519PrivateKey.from_private_bytes(HOST_KEY_SEED)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    for name, data, mode in (
        (PRIVATE_KEY_NAME, pem, 0o600),
        (PUBLIC_KEY_NAME, public_key_pem(key.public_key()), 0o644),
        ("partition.secret", PARTITION_SECRET.hex().encode("ascii") + b"\n", 0o600),
    ):
        (keys / name).write_bytes(data)
        os.chmod(keys / name, mode)
    return root


def test_hosting_bytes_of_the_pinned_grade_are_pinned(tmp_path: Path) -> None:
    graded = PINNED_REPORT.read_bytes()
    assert sha256(graded) == GRADE_REPORT_SHA256
    report = jsonio.loads(graded)
    competition = load_competition(write_competition(tmp_path / "c.toml", tables={"leaderboard": {"public_fraction": 0.3}}))
    ctx, db = prepare(ServeOptions(competition=competition, state_dir=_host_state(tmp_path / "state"), workers=0))
    try:
        with db.session() as session:
            participant, _token = create_participant(session, "alice", None)
            rekey_local_worker(session, "w1")
            worker_id = session.scalar(select(Worker.id).where(Worker.name == "w1"))
            submission = received_submission(
                submission_id=lifecycle.new_submission_id(),
                participant_id=participant.id,
                pin_id=ctx.pin_id,
                name=report["subject"]["name"],
                kind="onnx",
                track="hidden",
                split=ctx.split,
                upload_path="none",
                upload_sha256="0" * 64,
                upload_bytes=1,
                content_digest=report["subject"]["digest"]["sha256"],
                uploaded_at=utcnow(),
                attempt_limit=competition.max_attempts,
            )
            lifecycle.record_received(session, submission)
            submission_id = submission.id
        assert worker_id is not None
        assert lifecycle.enqueue(ctx.db, ctx.dispatcher, submission_id, actor="test")
        claim = lifecycle.claim(ctx.db, worker_id, 60)
        assert claim is not None and claim.submission_id == submission_id
        verdict = accept_posted(
            ctx.db,
            ctx.state,
            ctx.signing_key,
            submission_id=submission_id,
            attempt=claim.attempt,
            worker_id=worker_id,
            payload={"report": report},
            parts=acceptance_scorer(ctx),
        )
        assert (verdict.status, verdict.state) == ("accepted", "scored")
        with db.session() as session:
            row = session.get(Submission, submission_id)
            assert row is not None and row.result_id is not None
            result = session.get(Result, row.result_id)
            assert result is not None and result.report_path is not None
            session.expunge(row)
        assert_pinned(Path(result.report_path).read_bytes(), HOST_REPORT_SHA256, "host-signed full report.json", tmp_path / "host-report.json")
        envelope = report_envelope(ctx, row)
        assert envelope is not None
        public = ctx.state.result_dir(submission_id, claim.attempt) / "public-part" / "report.json"
        assert_pinned(public.read_bytes(), PUBLIC_REPORT_SHA256, "public-part report.json", tmp_path / "public-report.json")
        assert_pinned(envelope, PUBLIC_ENVELOPE_SHA256, "public-part report envelope", tmp_path / "public-report.dsse.json")
    finally:
        db.dispose()
