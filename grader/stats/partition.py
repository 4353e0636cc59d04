"""The public/private partition of a task's hidden queries, by a keyed hash with a host secret.

Commit before the start, reveal at the end: the host publishes
``commitment(secret)`` (hex SHA-256 of the secret) on the first day and the
secret itself at the end; anyone can then check the commitment and re-derive
the partition with :func:`partition`.

Rule (docs/statistics.md, "Public and private queries"): for a task named T
with queries Q, each query q gets the tag
``HMAC-SHA256(secret, len(T) as 4-byte big-endian || T || q)`` (UTF-8). The
queries are sorted by tag (ties, which do not happen, by query id) and the
first k are public, k = floor(f * |Q| + 1/2) for the public fraction f read as
the decimal it prints as, kept within [1, |Q| - 1] when |Q| >= 2 so neither
part is empty. Without the secret the tags are unpredictable, so nobody can
tell which queries are public; the size of each part is exact.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from grader.errors import UsageError

DEFAULT_PUBLIC_FRACTION = 0.3
#: Bytes of a fresh secret (256 bits).
SECRET_BYTES = 32
#: Shortest secret accepted: shorter ones could be guessed from the published partition.
MIN_SECRET_BYTES = 16


@dataclass(frozen=True)
class Partition:
    """The public and private query ids of one task, each sorted."""

    public: tuple[str, ...]
    private: tuple[str, ...]


def new_secret() -> bytes:
    """A fresh random partition secret."""
    return secrets.token_bytes(SECRET_BYTES)


def commitment(secret: bytes) -> str:
    """What is published before the start: the hex SHA-256 of the secret."""
    _check_secret(secret)
    return hashlib.sha256(secret).hexdigest()


def reveal_matches(secret: bytes, published: str) -> bool:
    """Whether a revealed ``secret`` is the one ``published`` committed to (constant-time comparison)."""
    return hmac.compare_digest(commitment(secret), published.lower())


def query_tag(secret: bytes, task: str, query_id: str) -> bytes:
    """HMAC-SHA256 of (length-prefixed task name, query id) under ``secret``."""
    name = task.encode("utf-8")
    message = len(name).to_bytes(4, "big") + name + query_id.encode("utf-8")
    return hmac.new(secret, message, hashlib.sha256).digest()


def public_count(total: int, fraction: float | str | Fraction = DEFAULT_PUBLIC_FRACTION) -> int:
    """How many of ``total`` queries are public: floor(f * total + 1/2), within [1, total - 1] when total >= 2."""
    share = _fraction(fraction)
    count = int(share * total + Fraction(1, 2))
    if total >= 2:
        count = min(max(count, 1), total - 1)
    return min(count, total)


def partition(secret: bytes, task: str, query_ids: Iterable[str], fraction: float | str | Fraction = DEFAULT_PUBLIC_FRACTION) -> Partition:
    """Split ``query_ids`` of ``task`` into public and private parts (see the module's rule)."""
    _check_secret(secret)
    ids = sorted(set(query_ids))
    ranked = sorted(ids, key=lambda query_id: (query_tag(secret, task, query_id), query_id))
    count = public_count(len(ids), fraction)
    return Partition(public=tuple(sorted(ranked[:count])), private=tuple(sorted(ranked[count:])))


def _fraction(value: float | str | Fraction) -> Fraction:
    share = value if isinstance(value, Fraction) else Fraction(str(value))
    if not 0 < share < 1:
        raise UsageError(f"public fraction {value} is not strictly between 0 and 1")
    return share


def _check_secret(secret: bytes) -> None:
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        raise UsageError(f"a partition secret must be at least {MIN_SECRET_BYTES} bytes")
