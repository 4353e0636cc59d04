"""The key of the session cookies: created at the first start (0600 file in keys/), never served."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from grader.files import atomic_write_bytes
from grader.hosting.keyring.files import KeyFiles


def ensure_session_secret(keys_dir: Path) -> str:
    """Create ``keys_dir/session.secret`` if missing and return it."""
    path = KeyFiles(keys_dir).session_secret
    if not os.path.lexists(path):
        atomic_write_bytes(path, secrets.token_hex(32).encode("ascii") + b"\n", mode=0o600)
    return path.read_text(encoding="ascii").strip()
