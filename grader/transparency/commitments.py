"""Keyed, per-entry commitments to identifiers: how a log entry names a participant without naming them.

Before the end an entry must not let anyone link two entries of one participant: a stable
pseudonym would (hash it once, find every entry). So each entry carries a fresh random ``salt``,
and each identifier in it (participant, submission, upload digest) is committed as::

    entry key  = HMAC-SHA256(identifier key, "grader-log entry key v1" || salt)
    commitment = HMAC-SHA256(entry key, uint32-BE len(field) || field || value)     (hex)

The identifier key is a host secret; entry 0 publishes its SHA-256 and the reveal discloses it.

* Before the reveal nobody can compute or test a commitment (the key is secret, and the salt makes
  every commitment of one identifier different), so no two entries share a value.
* The host hands a participant the *entry key* of their own entries (in the upload's answer): with
  it they open the commitments of that entry, and of no other (the entry key reveals nothing of the
  identifier key).
* After the reveal anyone derives every entry key and checks which entries name whom.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from grader.errors import UsageError

#: Bytes of a fresh identifier key and of a per-entry salt.
KEY_BYTES = 32
SALT_BYTES = 16
_ENTRY_KEY_LABEL = b"grader-log entry key v1"


def new_identifier_key() -> bytes:
    """A fresh random identifier key (keep it secret until the reveal)."""
    return secrets.token_bytes(KEY_BYTES)


def key_commitment(key: bytes) -> str:
    """What entry 0 publishes for a secret key: its hex SHA-256."""
    if len(key) < 16:
        raise UsageError(f"a committed key has at least 16 bytes, not {len(key)}")
    return hashlib.sha256(key).hexdigest()


def entry_key(identifier_key: bytes, salt: bytes) -> bytes:
    """The key that opens the commitments of the entry with ``salt``."""
    if len(salt) != SALT_BYTES:
        raise UsageError(f"an entry salt has {SALT_BYTES} bytes, not {len(salt)}")
    return hmac.new(identifier_key, _ENTRY_KEY_LABEL + salt, hashlib.sha256).digest()


def commit(key: bytes, field_name: str, value: str) -> str:
    """The hex commitment to ``value`` as the entry's ``field_name``, under the entry key ``key``."""
    name = field_name.encode("utf-8")
    message = len(name).to_bytes(4, "big") + name + value.encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def opens(key: bytes, field_name: str, value: str, commitment: str) -> bool:
    """Whether ``commitment`` commits to ``value`` as ``field_name`` under entry key ``key`` (constant time)."""
    return hmac.compare_digest(commit(key, field_name, value), commitment)


@dataclass(frozen=True)
class EntryCommitter:
    """The salt and entry key of one entry being written; :meth:`commit` fills its identifier fields."""

    salt: bytes
    key: bytes = field(repr=False)

    @classmethod
    def fresh(cls, identifier_key: bytes) -> EntryCommitter:
        """A committer with a new random salt."""
        salt = secrets.token_bytes(SALT_BYTES)
        return cls(salt, entry_key(identifier_key, salt))

    def commit(self, field_name: str, value: str) -> str:
        """The commitment to ``value`` as ``field_name`` in this entry."""
        return commit(self.key, field_name, value)
