"""The competition's blinding key: created at the first start (0600 file), committed to from day one, revealed at the end.

It makes the pseudonymous ids every container of the competition sees
(``docs/protocol.md``, "What the container sees"); workers never receive it: they
hold a copy of the data already under those ids (:mod:`grader.hosting.protocol.worker_data`). Its id (:func:`grader.sandbox.blinding.key_id`, a domain-separated SHA-256)
is recorded in the database at the first start, published beside the partition
commitment, and named in every report; the key itself is published at the end,
with the partition secret, so anyone can check which key staged a grade. A later
start with another key file is refused, so the published key id cannot silently change.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from grader.errors import KeyFileError
from grader.hosting.db.models import Setting
from grader.hosting.errors import HostingError
from grader.hosting.keyring.files import KeyFiles
from grader.sandbox.blinding import BlindingKey
from grader.sandbox.blinding_key import ensure_blinding_key, load_blinding_key

KEY_ID_SETTING = "blinding_key_id"


def ensure_competition_blinding_key(keys_dir: Path) -> BlindingKey:
    """Create ``keys_dir/blinding.secret`` (hex, 0600) if missing; load it, refusing a file others can read."""
    try:
        return ensure_blinding_key(KeyFiles(keys_dir).blinding_secret)
    except KeyFileError as error:
        raise HostingError(str(error)) from None


def load_competition_blinding_key(keys_dir: Path) -> BlindingKey:
    """Load ``keys_dir/blinding.secret``, made by the first ``grader serve``; never create it (its id is recorded at that start)."""
    path = KeyFiles(keys_dir).blinding_secret
    if not path.exists():
        raise HostingError(f"{path}: no blinding key yet", hint="start `grader serve --state DIR` once: it creates the key and records its id")
    try:
        return load_blinding_key(path)
    except KeyFileError as error:
        raise HostingError(str(error)) from None


def record_blinding_key_id(session: Session, key: BlindingKey) -> str:
    """Record the key's id at the first start; refuse a key whose id is not the recorded one."""
    row = session.get(Setting, KEY_ID_SETTING)
    if row is None:
        session.add(Setting(key=KEY_ID_SETTING, value=key.key_id))
    elif row.value != key.key_id:
        raise HostingError("the blinding key does not match the key id published at the first start (keys/blinding.secret was replaced)")
    return key.key_id
