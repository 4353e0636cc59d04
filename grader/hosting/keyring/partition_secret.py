"""The host's partition secret: created at the first start (0600 file), committed to from day one, revealed at the end.

The secret decides which hidden queries are public (:func:`grader.stats.partition.partition`).
Its SHA-256 (the commitment) is recorded in the database at the first start and published;
a later start with another secret file is refused, so the published commitment cannot silently change.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.files import atomic_write_bytes
from grader.hosting.db.models import Setting
from grader.hosting.errors import HostingError
from grader.hosting.keyring.files import KeyFiles
from grader.stats.partition import commitment, new_secret

COMMITMENT_SETTING = "partition_commitment"


def ensure_partition_secret(keys_dir: Path) -> bytes:
    """Create ``keys_dir/partition.secret`` (hex, 0600) if missing; load it, refusing a file others can read."""
    path = KeyFiles(keys_dir).partition_secret
    if not os.path.lexists(path):
        atomic_write_bytes(path, new_secret().hex().encode("ascii") + b"\n", mode=0o600)
    return load_partition_secret(keys_dir)


def load_partition_secret(keys_dir: Path) -> bytes:
    """Load ``keys_dir/partition.secret`` (never creating one), refusing a missing file or one others can read."""
    path = KeyFiles(keys_dir).partition_secret
    if not os.path.lexists(path):
        raise HostingError(f"{path}: no partition secret here", hint="start `grader serve --state DIR` once first")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        raise HostingError(f"{path}: the partition secret is readable by others (mode {mode:04o}); run: chmod 600 {path}")
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except ValueError:
        raise HostingError(f"{path}: not a hex partition secret") from None


def record_commitment(session: Session, secret: bytes) -> str:
    """Record the secret's commitment at the first start; refuse a secret that does not match the recorded one."""
    published = commitment(secret)
    row = session.get(Setting, COMMITMENT_SETTING)
    if row is None:
        session.add(Setting(key=COMMITMENT_SETTING, value=published))
    elif row.value != published:
        raise HostingError("the partition secret does not match the commitment published at the first start (keys/partition.secret was replaced)")
    return published


def recorded_commitment(session: Session) -> str | None:
    """The commitment recorded at the first start."""
    return session.scalar(select(Setting.value).where(Setting.key == COMMITMENT_SETTING))
