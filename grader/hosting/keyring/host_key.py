"""The host's signing key: created at first start (0600, optionally encrypted), loaded once, used to sign reports.

With ``GRADER_HOST_KEY_PASSPHRASE`` set at the first start the private key is
written encrypted (PKCS#8, the library's best available encryption); every
later start needs the same variable. The passphrase is never logged or stored.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.errors import KeyFileError
from grader.files import atomic_write_bytes
from grader.hosting.environment import HOST_KEY_PASSPHRASE, environment
from grader.hosting.keyring.files import KeyFiles
from grader.reports.dsse import envelope_json
from grader.reports.keys import public_key_pem
from grader.reports.model import report_json
from grader.reports.signing import ENVELOPE_NAME, REPORT_NAME, sign_report
from grader.reports.verify import verify_envelope

PASSPHRASE_ENV = HOST_KEY_PASSPHRASE


def _passphrase() -> bytes | None:
    value = environment().host_key_passphrase
    return value.encode("utf-8") if value else None


def ensure_host_key(keys_dir: Path) -> Ed25519PrivateKey:
    """Create the key pair in ``keys_dir`` if missing (private half 0600); load and return the private key."""
    files = KeyFiles(keys_dir)
    private_path, public_path = files.host_private, files.host_public
    if not os.path.lexists(private_path):
        key = Ed25519PrivateKey.generate()
        secret = _passphrase()
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(secret) if secret else serialization.NoEncryption()
        )
        atomic_write_bytes(private_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption), mode=0o600)
        atomic_write_bytes(public_path, public_key_pem(key.public_key()), mode=0o644)
    key = load_host_key(private_path)
    if not public_path.is_file() or public_path.read_bytes() != public_key_pem(key.public_key()):
        raise KeyFileError("missing, or not the public half of the host key", path=public_path)
    return key


def load_host_key(path: Path, *, what: str = "host key") -> Ed25519PrivateKey:
    """Load the host key, refusing a file others can read; decrypt it with the passphrase if it is encrypted.

    ``what`` names the key in errors: the transparency log's key (:mod:`grader.hosting.keyring.log_key`) is kept the same way.
    """
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        raise KeyFileError(f"private key is readable by others (mode {mode:04o}); run: chmod 600 {path}", path=path)
    data = path.read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=_passphrase())
    except TypeError:
        # encrypted without a passphrase given, or a passphrase given for an unencrypted key
        raise KeyFileError(
            f"the {what}'s encryption does not match {PASSPHRASE_ENV} (set it to the passphrase of the first start, or unset it)", path=path
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise KeyFileError(f"cannot read the {what} (wrong {PASSPHRASE_ENV}, or not a PEM PKCS#8 key)", path=path) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError("not an Ed25519 private key", path=path)
    return key


def sign_and_store(report: dict[str, Any], key: Ed25519PrivateKey, folder: Path) -> tuple[Path, Path]:
    """Sign ``report``; write ``report.dsse.json`` and the plain ``report.json`` (as verified) into ``folder``."""
    envelope = envelope_json(sign_report(report, key))
    verified = verify_envelope(envelope, key.public_key())
    plain = atomic_write_bytes(folder / REPORT_NAME, report_json(verified.report))
    signed = atomic_write_bytes(folder / ENVELOPE_NAME, envelope)
    return signed, plain
