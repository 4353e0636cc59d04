"""The transparency log's signing key: an Ed25519 key of its own, beside the host key, under the same passphrase.

``keys/log.key`` (PKCS#8 PEM, 0600, encrypted when ``GRADER_HOST_KEY_PASSPHRASE`` is set at the first
start) signs the log's checkpoints as a C2SP signed note named after the log's origin;
``keys/log.vkey`` holds its public verifier key (``<origin>+<hex id>+<base64 key>``), the one
clients pass as ``--log-key``. It is separate from the host key so that either can be rotated or
handed to a co-signer without the other.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.errors import KeyFileError
from grader.files import atomic_write_bytes
from grader.hosting.environment import environment
from grader.hosting.keyring.files import KeyFiles
from grader.hosting.keyring.host_key import load_host_key
from grader.transparency.note import NoteSigner

_ORIGIN_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def log_origin(competition_name: str) -> str:
    """The log's origin (and its key's name): ``grader-log/<competition name>``, spaces and ``+`` made ``-``."""
    return "grader-log/" + (_ORIGIN_CHARS.sub("-", competition_name)[:100] or "competition")


def ensure_log_key(keys_dir: Path, origin: str) -> NoteSigner:
    """Create the log key in ``keys_dir`` if missing (0600, encrypted like the host key); load it as a note signer.

    Refuses a key whose published verifier key names another origin (the log was renamed) or another key.
    """
    files = KeyFiles(keys_dir)
    private_path, vkey_path = files.log_private, files.log_verifier
    if not os.path.lexists(private_path):
        key = Ed25519PrivateKey.generate()
        passphrase = environment().host_key_passphrase
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(passphrase.encode("utf-8")) if passphrase else serialization.NoEncryption()
        )
        atomic_write_bytes(private_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption), mode=0o600)
        signer = NoteSigner(origin, key)
        atomic_write_bytes(vkey_path, (signer.verifier.vkey + "\n").encode("ascii"), mode=0o644)
    signer = NoteSigner(origin, load_host_key(private_path, what="log key"))
    try:
        published = vkey_path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        published = None
    if published != signer.verifier.vkey:
        raise KeyFileError(f"missing, or not the verifier key of the log key for origin {origin!r}", path=vkey_path)
    return signer
