"""The webhook's signature: ``Grader-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``.

The timestamp is signed with the body, so a receiver that refuses a ``t`` older than a few minutes refuses a replay;
the receiver compares in constant time. docs/hosting.md, "Notifications", has the recipe a receiver follows, which
:func:`verify` is (the tests verify with it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

HEADER = "Grader-Signature"
#: The bytes of a new secret (shown once, as ``whsec_`` and hex).
SECRET_BYTES = 32
PREFIX = "whsec_"
#: The replay window :func:`verify` allows by default, in seconds.
TOLERANCE_S = 300


def new_secret() -> str:
    """A fresh per-participant secret."""
    return PREFIX + secrets.token_hex(SECRET_BYTES)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, now: int, tolerance_s: int = TOLERANCE_S) -> bool:
    """Whether ``header`` signs ``body`` under ``secret`` within ``tolerance_s`` of ``now`` (the receiver's check)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    if not fields.get("t", "").isdigit() or abs(now - int(fields["t"])) > tolerance_s:
        return False
    expected = hmac.new(secret.encode(), fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields.get("v1", ""))
