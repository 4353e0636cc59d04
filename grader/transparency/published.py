"""The audit's check of the log against what its host publishes beside it (``grader log audit URL --host``).

Entry 0 commits to the competition before anyone submits; the host also publishes, from day one, the partition
commitment and the pinned data digests (``/api/v1/partition``) and its report key (``/host-key.pub``). This check
ties the two: the served commitment must be entry 0's, the served data digests those the log names last (entry 0,
or the latest ``repin``), the served host key the one whose id entry 0 names, and a published partition secret
(after the end) must open entry 0's commitment. A host that serves one thing and logged another is caught.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from grader import jsonio
from grader.transparency.entries import decode_entry
from grader.transparency.errors import LogVerificationError

PARTITION_PATH = "api/v1/partition"
HOST_KEY_PATH = "host-key.pub"


def served_digests(pin_digests: Mapping[str, Any]) -> dict[str, str]:
    """The data digests ``/api/v1/partition`` serves (``{"tasks": {task: {split: digest}}}``) as entries name them:
    ``<task>/<split>`` to hex SHA-256."""
    tasks = pin_digests.get("tasks")
    if not isinstance(tasks, dict) or not all(isinstance(splits, dict) for splits in tasks.values()):
        raise LogVerificationError(f"{PARTITION_PATH}: data_digests is not a digest per task and split")
    return {f"{task}/{split}": str(digest) for task, splits in sorted(tasks.items()) for split, digest in sorted(splits.items())}


def _host_key_id(pem: bytes) -> str:
    try:
        key = load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise LogVerificationError(f"{HOST_KEY_PATH}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise LogVerificationError(f"{HOST_KEY_PATH}: not an Ed25519 public key")
    return hashlib.sha256(key.public_bytes_raw()).hexdigest()


def _sha256_of_hex(value: Any) -> str | None:
    try:
        return hashlib.sha256(bytes.fromhex(str(value))).hexdigest()
    except ValueError:
        return None


def check_published(entries: Sequence[bytes], read: Callable[[str], bytes]) -> str:
    """Check what the host publishes (``read(path)``: ``api/v1/partition``, ``host-key.pub``) against the log's
    ``entries`` (already audited: entry 0 is the competition's); the line to print, or :class:`LogVerificationError`."""
    decoded = [decode_entry(entry) for entry in entries]
    first = decoded[0]
    named = max((index for index, entry in enumerate(decoded) if entry["kind"] in ("competition", "repin")), default=0)
    try:
        partition = jsonio.loads(read(PARTITION_PATH))
    except jsonio.JsonError as error:
        raise LogVerificationError(f"{PARTITION_PATH}: not JSON: {error.what}") from None
    if not isinstance(partition, dict):
        raise LogVerificationError(f"{PARTITION_PATH}: not a JSON object")
    commitment = partition.get("commitment")
    if not isinstance(commitment, str) or not hmac.compare_digest(commitment, first["partition_commitment"]):
        raise LogVerificationError(f"{PARTITION_PATH}: the partition commitment served is not the one entry 0 logged")
    secret = partition.get("secret")
    if secret is not None and _sha256_of_hex(secret) != first["partition_commitment"]:
        raise LogVerificationError(f"{PARTITION_PATH}: the partition secret served does not open entry 0's commitment")
    if served_digests(partition.get("data_digests") or {}) != decoded[named]["data_digests"]:
        raise LogVerificationError(f"{PARTITION_PATH}: the data digests served are not the ones the log names last (entry {named})")
    if _host_key_id(read(HOST_KEY_PATH)) != first["host_key_id"]:
        raise LogVerificationError(f"{HOST_KEY_PATH}: the host key served is not the one entry 0 names")
    return f"host: serves entry 0's partition commitment and host key, and the data digests of entry {named}"
