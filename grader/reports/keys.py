"""Ed25519 signing keys: generation, PEM files, permissions and key ids.

Private key material never leaves this module in a message: errors about a key
file name the file and the problem, never its contents.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grader.errors import KeyFileError
from grader.files import atomic_write_bytes

PRIVATE_KEY_NAME = "grader.key"
PUBLIC_KEY_NAME = "grader.pub"
#: Permission bits of a written private key: owner read/write only.
PRIVATE_KEY_MODE = 0o600
#: Largest key file we read; PEM Ed25519 keys are about 120 bytes.
_MAX_KEY_FILE = 64 * 1024


def keyid(public_key: Ed25519PublicKey) -> str:
    """Hex sha256 of the raw 32-byte public key: the ``keyid`` in our envelopes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def private_key_pem(private_key: Ed25519PrivateKey) -> bytes:
    """PEM PKCS#8, unencrypted (the file's permissions protect it)."""
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def public_key_pem(public_key: Ed25519PublicKey) -> bytes:
    """PEM SubjectPublicKeyInfo."""
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def write_keypair(out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Generate a key pair into ``out_dir`` as ``grader.key`` (mode 0600) and ``grader.pub``.

    Refuses, writing nothing, when either file already exists: overwriting a key
    would orphan every report signed with it. Returns (private path, public path).
    """
    folder = Path(out_dir)
    private_path = folder / PRIVATE_KEY_NAME
    public_path = folder / PUBLIC_KEY_NAME
    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise KeyFileError("already exists; refusing to overwrite a key", path=path)
    private_key = Ed25519PrivateKey.generate()
    atomic_write_bytes(private_path, private_key_pem(private_key), mode=PRIVATE_KEY_MODE)
    try:
        atomic_write_bytes(public_path, public_key_pem(private_key.public_key()), mode=0o644)
    except BaseException:
        # Leave no half pair behind: a lone private key would block the retry.
        private_path.unlink(missing_ok=True)
        raise
    return private_path, public_path


def _read_key_file(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE + 1)
    except OSError as error:
        raise KeyFileError(f"cannot read key file: {error.strerror or error}", path=path) from None
    if len(data) > _MAX_KEY_FILE:
        raise KeyFileError("too large to be a key file", path=path)
    return data


def _check_private_permissions(path: Path) -> None:
    if os.name != "posix":
        return  # POSIX permission bits mean nothing elsewhere
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as error:
        raise KeyFileError(f"cannot read key file: {error.strerror or error}", path=path) from None
    if mode & 0o077:
        raise KeyFileError(
            f"private key is readable by others (mode {mode:04o}); run: chmod 600 {path}",
            path=path,
        )


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Load an unencrypted PEM PKCS#8 Ed25519 private key, refusing group/world-accessible files."""
    key_path = Path(path)
    _check_private_permissions(key_path)
    data = _read_key_file(key_path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        # cryptography raises TypeError for an encrypted key read without a password.
        raise KeyFileError("private key is encrypted; grader keys are unencrypted PEM", path=key_path) from None
    except (ValueError, UnsupportedAlgorithm):
        # The library's message is dropped on purpose: it must not echo key bytes.
        raise KeyFileError("not a PEM PKCS#8 private key", path=key_path) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError("not an Ed25519 private key", path=key_path)
    return key


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """Load a PEM SubjectPublicKeyInfo Ed25519 public key."""
    key_path = Path(path)
    data = _read_key_file(key_path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        if b"PRIVATE KEY" in data:
            raise KeyFileError(f"is a private key; pass the public key ({PUBLIC_KEY_NAME}) instead", path=key_path) from None
        raise KeyFileError("not a PEM public key", path=key_path) from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError("not an Ed25519 public key", path=key_path)
    return key
