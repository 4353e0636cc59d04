"""A result signed by a worker of an earlier release still verifies: the signed bytes are pinned.

The message models name their fields' allowed values with enums (tracks, states, failure codes); a posted
result's fields must still reach :func:`grader.hosting.keyring.worker_signing.verify_result` as the same
values, so the same canonical bytes, that the worker signed. The signature below was made by the worker
code of the release before the enums (Ed25519 is deterministic: the same key and bytes give it again).
"""

from __future__ import annotations

import hashlib
import json

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.failures import FailureCode
from grader.hosting.keyring.worker_signing import sign_result, verify_result
from grader.hosting.protocol.messages import WorkerResult

KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"a worker of main").digest())
PUBLIC = KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")
BOUND = {"submission_id": "s-0001", "attempt": 2, "upload_sha256": "ab" * 32}
POSTED = {
    "attempt": 2,
    "facts": {"tasks": {"t": {"status": "failed", "failure": "TIMEOUT"}}},
    "runs": {"t": "cd" * 32},
    "failure_code": "TIMEOUT",
    "message": "time limit",
}
#: sign_result(KEY, **BOUND, **POSTED less attempt) as the worker of the release before the enums computed it
SIGNED_BEFORE = "lJ3ZccKVTimwpOvaDIx5tdoeAq+VOnogQ6MMAGzMcBaj/Gsva00iwb6AiJNMSGmbiAPyEr2mVqskUA2YK+MhAg=="


def _fields(result: WorkerResult) -> dict[str, object]:
    """What the acceptance hands to the signature check: the posted model as a dict (services/jobs.py), bound to the job."""
    payload = result.model_dump()
    return {**BOUND, **{key: payload[key] for key in ("facts", "runs", "failure_code", "message")}}


def test_a_result_signed_before_the_enums_verifies_as_the_server_reads_it() -> None:
    posted = WorkerResult.model_validate_json(json.dumps({**POSTED, "signature": SIGNED_BEFORE}))
    assert verify_result(PUBLIC, posted.signature, **_fields(posted))
    # a failure code given as the enum signs the same bytes as its text
    assert sign_result(KEY, **{**_fields(posted), "failure_code": FailureCode.TIMEOUT}) == SIGNED_BEFORE
    # and the pin can fail: another message is another signature
    assert not verify_result(PUBLIC, SIGNED_BEFORE, **{**_fields(posted), "message": "time limit!"})
