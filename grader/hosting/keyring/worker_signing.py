"""Results signed by a registered worker's Ed25519 key, bound to the submission's digest and the attempt.

A remote worker signs the canonical JSON (RFC 8785) of what it posts (the facts of its
grade and the sha256 of each task's compact run: the runs themselves are put apart), together
with the submission id, the attempt number and the sha256 of the upload it
fetched. The server checks the signature with the public key the host
recorded (``grader admin add-worker``) before anything else: a result copied
from another attempt, another submission or another worker does not verify.

A remote worker also signs the one statement of its fingerprint (:func:`fingerprint_message`),
under a payload type of its own: the server binds the fingerprint to the worker only when the
registered key signed it, for this worker's name and this competition.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grader.errors import KeyFileError
from grader.reports.keys import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME, load_private_key, public_key_pem, write_keypair

#: What the signature covers is tagged, so it can never be confused with another signed message.
PAYLOAD_TYPE = "application/vnd.grader.worker-result.v2+json"


def result_message(
    *,
    submission_id: str,
    attempt: int,
    upload_sha256: str,
    facts: dict[str, Any] | None,
    runs: dict[str, str] | None,
    failure_code: str | None,
    message: str,
) -> bytes:
    """The exact bytes a worker signs for one result: its facts and the digests of its compact runs (never a score)."""
    return rfc8785.dumps(
        {
            "type": PAYLOAD_TYPE,
            "submission_id": submission_id,
            "attempt": attempt,
            "upload_sha256": upload_sha256,
            "facts": facts,
            "runs": dict(runs or {}),
            "failure_code": failure_code,
            "message": message,
        }
    )


def sign_result(key: Ed25519PrivateKey, **fields: Any) -> str:
    """Base64 signature of :func:`result_message` over ``fields``."""
    return base64.b64encode(key.sign(result_message(**fields))).decode("ascii")


def verify_result(public_key_pem_text: str, signature: str | None, **fields: Any) -> bool:
    """Whether ``signature`` is the registered key's signature of these fields."""
    return _verifies(public_key_pem_text, signature, lambda: result_message(**fields))


#: The tag of a worker's fingerprint statement: never confused with a signed result, nor a result with it.
FINGERPRINT_PAYLOAD_TYPE = "application/vnd.grader.worker-fingerprint.v1+json"


def fingerprint_message(*, worker: str, competition: str, fingerprint: dict[str, Any]) -> bytes:
    """The exact bytes a remote worker signs to state its fingerprint: bound to its name and the competition's.

    The name and the competition keep a statement from being replayed for another worker sharing the key, or in
    another competition; the fingerprint itself is signed whole (its digest, what claims name, is the server's).
    """
    return rfc8785.dumps({"type": FINGERPRINT_PAYLOAD_TYPE, "worker": worker, "competition": competition, "fingerprint": fingerprint})


def sign_fingerprint(key: Ed25519PrivateKey, **fields: Any) -> str:
    """Base64 signature of :func:`fingerprint_message` over ``fields``."""
    return base64.b64encode(key.sign(fingerprint_message(**fields))).decode("ascii")


def verify_fingerprint(public_key_pem_text: str, signature: str | None, **fields: Any) -> bool:
    """Whether ``signature`` is the registered key's signature of this fingerprint statement."""
    return _verifies(public_key_pem_text, signature, lambda: fingerprint_message(**fields))


def _verifies(public_key_pem_text: str, signature: str | None, message: Callable[[], bytes]) -> bool:
    """Whether ``signature`` (base64) is the Ed25519 signature by the PEM key of the bytes ``message`` builds."""
    if not signature or len(signature) > 200:
        return False
    try:
        key = serialization.load_pem_public_key(public_key_pem_text.encode("ascii"))
        raw = base64.b64decode(signature, validate=True)
    except (ValueError, TypeError):
        return False
    if not isinstance(key, Ed25519PublicKey):
        return False
    try:
        key.verify(raw, message())
    except (InvalidSignature, rfc8785.CanonicalizationError):
        return False
    return True


def check_public_key(text: str) -> str:
    """``text`` if it is a PEM Ed25519 public key (normalised), else :class:`KeyFileError`."""
    try:
        key = serialization.load_pem_public_key(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise KeyFileError("not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError("not an Ed25519 public key")
    return public_key_pem(key).decode("ascii")


def ensure_worker_key(key_dir: Path) -> Ed25519PrivateKey:
    """The worker's key pair in ``key_dir``: generated on first start (private half 0600), then loaded."""
    if not os.path.lexists(key_dir / PRIVATE_KEY_NAME):
        key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_keypair(key_dir)
    return load_private_key(key_dir / PRIVATE_KEY_NAME)


def worker_public_key_path(key_dir: Path) -> Path:
    """Where the worker's public half lives (give it to the host for ``grader admin add-worker --public-key``)."""
    return key_dir / PUBLIC_KEY_NAME
