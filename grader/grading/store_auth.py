"""The key that proves a stored task result was written by this grader (for signed runs).

A signed report may only contain results the signer can vouch for. A task result
read back from ``OUT/tasks`` is reused in a signed report only if it carries an
HMAC-SHA256 made with a key derived (HKDF-SHA256) from the signing key's private
bytes: whoever can edit ``OUT`` but does not hold the private key cannot forge one.
The MAC key is separate from the signing key (HKDF with its own ``info``), so the
MAC never exposes or reuses the Ed25519 key itself.

Unsigned runs write and reuse results without a MAC: an unsigned report vouches
for nothing, and whoever can write ``OUT`` can rewrite ``report.json`` directly.
A signed run never reuses such an unauthenticated result; it grades that task again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from grader.reports.keys import load_private_key

ALGORITHM = "hmac-sha256"
_INFO = b"grader task-store mac v1"


def canonical(value: Any) -> bytes:
    """The bytes a MAC covers: sorted keys, no spaces, ASCII, NaN refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


@dataclass(frozen=True)
class StoreAuthenticator:
    """Makes and checks the MAC of a stored entry; ``key_id`` names the key without revealing it."""

    key: bytes

    @property
    def key_id(self) -> str:
        """A public name of the MAC key (a hash of it under a distinct label)."""
        return hashlib.sha256(b"grader task-store key id\x00" + self.key).hexdigest()[:16]

    def mac(self, record: dict[str, Any]) -> str:
        """Hex HMAC of ``record`` (the stored ``key`` and ``entry``)."""
        return hmac.new(self.key, canonical(record), hashlib.sha256).hexdigest()

    def check(self, record: dict[str, Any], mac: Any) -> bool:
        """Whether ``mac`` authenticates ``record``, compared in constant time."""
        return isinstance(mac, str) and hmac.compare_digest(self.mac(record), mac)


def authenticator_from_key(key_path: str | os.PathLike[str]) -> StoreAuthenticator:
    """The store authenticator of the Ed25519 private key at ``key_path`` (HKDF-derived)."""
    private = load_private_key(key_path)
    raw = private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(raw)
    return StoreAuthenticator(derived)
