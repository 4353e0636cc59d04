"""Blinding key files: hex, one line, mode 0600, never overwritten.

``grader keygen`` writes ``blinding.key`` beside the signing key; ``grader run``
without ``--key`` keeps one in its OUT folder; a hosted competition keeps its own
in the state's ``keys/`` folder. The key's bytes never appear in a message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from grader.errors import KeyFileError, UsageError
from grader.files import atomic_write_bytes
from grader.sandbox.blinding import BlindingKey

#: The file name beside a signing key (``grader keygen``) and in a ``grader run`` OUT folder.
BLINDING_KEY_NAME = "blinding.key"
KEY_FILE_MODE = 0o600
#: Largest file read as a key (a 32-byte key is 65 bytes of hex and newline).
_MAX_FILE = 4096


def write_blinding_key(path: Path, key: BlindingKey | None = None) -> BlindingKey:
    """Write ``key`` (a fresh one if None) to ``path`` as hex, mode 0600; refuse to overwrite a file."""
    if os.path.lexists(path):
        raise KeyFileError("already exists; refusing to overwrite a key", path=path)
    key = key or BlindingKey.generate()
    atomic_write_bytes(path, key.secret.hex().encode("ascii") + b"\n", mode=KEY_FILE_MODE)
    return key


def load_blinding_key(path: Path) -> BlindingKey:
    """Read a blinding key file, refusing a link, a file others can read, or anything but hex of 16+ bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise KeyFileError("no blinding key here", path=path) from None
    except OSError as error:
        raise KeyFileError(f"cannot read the blinding key: {error.strerror or error}", path=path) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError("the blinding key is not a regular file", path=path)
        mode = stat.S_IMODE(info.st_mode)
        if os.name == "posix" and mode & 0o077:
            raise KeyFileError(f"the blinding key is readable by others (mode {mode:04o}); run: chmod 600 {path}", path=path)
        data = handle.read(_MAX_FILE + 1)
    if len(data) > _MAX_FILE:
        raise KeyFileError("too large to be a blinding key", path=path)
    try:
        secret = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        # The content is not quoted: it is meant to be a secret.
        raise KeyFileError("not a hex blinding key", path=path) from None
    try:
        return BlindingKey(secret)
    except UsageError:
        raise KeyFileError("too short to be a blinding key (16 bytes at least)", path=path) from None


def ensure_blinding_key(path: Path) -> BlindingKey:
    """Load the key at ``path``, creating a fresh one (0600) first if there is none."""
    if not os.path.lexists(path):
        try:
            return write_blinding_key(path)
        except KeyFileError:
            pass  # another process created it meanwhile: read theirs
    return load_blinding_key(path)
