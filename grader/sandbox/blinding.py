"""Pseudonymous ids for a staged task: a container never sees a benchmark's own ids, nor its order.

Benchmark ids can give the answer away (CAT pairs query ``q-<n>`` with document
``c-<n>``), and so can file order. So a container sees each query and document
under a pseudonym, a keyed hash of its id, and both files sorted by pseudonym: a
function of the ids and the key alone. Without the key the pseudonyms are
unpredictable, so neither an id pattern nor a position says anything about
relevance. The grader maps what the container returns back to the real ids
(:mod:`grader.collect.unblind`) before scoring.

Rule (``docs/protocol.md``, "What the container sees"): for a task named T, the
pseudonym of a query (kind ``q``) or document (kind ``d``) with id ``i`` is the
kind letter followed by the first 24 hex digits (96 bits) of
``HMAC-SHA256(key, "grader blinding v1" || 0x00 || kind || len(T) as 4-byte
big-endian || T || i)`` (UTF-8). The kind letter keeps a query and a document
with the same id apart. Two ids of one kind that share a pseudonym (about
n^2 / 2^97 for n ids: never, in practice) stop the task as an infrastructure
error, never merged.

The key's id, which reports name and a hosted competition publishes from day one,
is the hex SHA-256 of ``"grader blinding key v1" || 0x00 || key``: once the key is
revealed anyone can check which key staged a grade.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import TYPE_CHECKING

from grader.errors import SandboxUnavailable, UsageError

if TYPE_CHECKING:
    import numpy as np

#: Names the rule above; a report records it beside the key id.
SCHEME = "hmac-sha256-96/v1"
#: Bytes of a fresh key (256 bits); shorter keys than MIN_KEY_BYTES are refused.
KEY_BYTES = 32
MIN_KEY_BYTES = 16
#: Hex digits of the MAC kept in a pseudonym (96 bits).
PSEUDONYM_HEX = 24
_ID_DOMAIN = b"grader blinding v1\x00"
_KEY_ID_DOMAIN = b"grader blinding key v1\x00"
QUERY = "q"
DOCUMENT = "d"


@dataclass(frozen=True, repr=False)
class BlindingKey:
    """A blinding key. Its bytes never appear in a message or a ``repr``; its :attr:`key_id` may be published."""

    secret: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes) or len(self.secret) < MIN_KEY_BYTES:
            raise UsageError(f"a blinding key must be at least {MIN_KEY_BYTES} bytes")

    @classmethod
    def generate(cls) -> BlindingKey:
        """A fresh random key."""
        return cls(secrets.token_bytes(KEY_BYTES))

    @cached_property
    def key_id(self) -> str:
        """Hex SHA-256 of the domain-separated key: the commitment published before, and checked after, the reveal."""
        return key_id(self.secret)

    def report(self) -> dict[str, str]:
        """What a report records of the key: the scheme and the key id (never the key)."""
        return {"scheme": SCHEME, "key_id": self.key_id}

    def __repr__(self) -> str:
        return f"BlindingKey(key_id={self.key_id[:16]}...)"


def key_id(secret: bytes) -> str:
    """The id of the blinding key ``secret`` (see the module's rule)."""
    return hashlib.sha256(_KEY_ID_DOMAIN + secret).hexdigest()


def pseudonyms(key: BlindingKey, task: str, kind: str, ids: Sequence[str]) -> list[str]:
    """The pseudonym of each id in ``ids`` (of ``kind`` ``q`` or ``d``) in task ``task``, in the same order."""
    if kind not in (QUERY, DOCUMENT):
        raise UsageError(f"kind must be {QUERY!r} or {DOCUMENT!r}")
    name = task.encode("utf-8")
    prefix = _ID_DOMAIN + kind.encode("ascii") + len(name).to_bytes(4, "big") + name
    secret, digest = key.secret, hmac.digest
    return [kind + digest(secret, prefix + identifier.encode("utf-8", "surrogatepass"), "sha256").hex()[:PSEUDONYM_HEX] for identifier in ids]


@dataclass(frozen=True, eq=False)
class BlindedIds:
    """One side of a staged task (its queries or its documents).

    ``staged``: the pseudonyms, sorted (the order of the staged file);
    ``real``: the real id of each staged row; ``rows``: for each id in the
    order it was given, its staged row (so ``staged_array[rows]`` puts rows back).
    """

    staged: tuple[str, ...]
    real: tuple[str, ...]
    rows: np.ndarray

    @cached_property
    def real_of(self) -> dict[str, str]:
        """Pseudonym -> real id."""
        return dict(zip(self.staged, self.real))


@dataclass(frozen=True)
class Preblinded:
    """Data whose ids already are the pseudonyms of a key: a worker's exported copy (``grader admin export-worker-data``).

    A worker never holds the key: it stages such data as it is (its ids are the
    pseudonyms, already sorted by the staging), and names the key by the id the copy
    records. Every id must look like a pseudonym (kind letter, 24 lowercase hex digits):
    data with the benchmark's own ids is refused, never staged unblinded.
    """

    key_id: str

    def report(self) -> dict[str, str]:
        """What a report records of the key that made the copy: the scheme and the key id."""
        return {"scheme": SCHEME, "key_id": self.key_id}


def _pseudonym_pattern(kind: str) -> re.Pattern[str]:
    return re.compile(f"{kind}[0-9a-f]{{{PSEUDONYM_HEX}}}")


def blind(key: BlindingKey | Preblinded, task: str, kind: str, ids: Sequence[str]) -> BlindedIds:
    """Pseudonyms of ``ids``, sorted; :class:`SandboxUnavailable` (INFRA) if two of them collide.

    Under :class:`Preblinded` the ids are the pseudonyms; one that is not shaped like
    a pseudonym of ``kind`` is :class:`SandboxUnavailable` (the worker's data is not an exported copy).
    """
    if isinstance(key, Preblinded):
        pattern = _pseudonym_pattern(kind)
        for identifier in ids:
            if pattern.fullmatch(identifier) is None:
                raise SandboxUnavailable(
                    f"task {task}: id {identifier[:40]!r} is not a pseudonym: this worker's data is not a copy exported by the server",
                    hint="copy the folder `grader admin export-worker-data` writes to this worker (docs/deploy.md)",
                )
        names = list(ids)
    else:
        names = pseudonyms(key, task, kind, ids)
    # Pseudonyms are ASCII: Python's str order is their byte order.
    order = sorted(range(len(names)), key=names.__getitem__)
    staged = tuple(names[i] for i in order)
    for before, after in pairwise(staged):
        if before == after:
            side = "query" if kind == QUERY else "document"
            raise SandboxUnavailable(
                f"task {task}: two {side} ids share the pseudonym {before} under blinding key {key.key_id[:16]}...; nothing was graded",
                hint="grade with another blinding key (a collision of 96-bit pseudonyms is a once-in-a-lifetime event: check the task for duplicate ids)",
            )
    # Imported here: key handling alone (the host's admin commands, the server's context) must not load numpy (it is slow to import).
    import numpy as np

    rows = np.empty(len(names), dtype=np.int64)
    rows[np.asarray(order, dtype=np.int64)] = np.arange(len(names), dtype=np.int64)
    return BlindedIds(staged, tuple(ids[i] for i in order), rows)
