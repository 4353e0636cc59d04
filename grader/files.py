"""Small file helpers shared by every subsystem: atomic writes and digests."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

_CHUNK = 1 << 20


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one.

    The bytes go to a temporary file in the same folder, are flushed to disk, and
    the file is renamed over ``path``. ``mode`` sets the permission bits before the
    rename, so a secret is never visible with looser permissions.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> Path:
    """UTF-8 text variant of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def listing_digest(entries: Iterable[tuple[str, str]]) -> str:
    """sha256 of the listing ``<sha256>  <path>`` per line (the ``sha256sum`` format), in the order given.

    ``entries`` are ``(relative posix path, hex sha256)``. The one way the grader names a set
    of files by one digest (a task split's data, a submission folder): reproducible with
    ``sha256sum FILE... | sha256sum``.
    """
    listing = "".join(f"{digest}  {name}\n" for name, digest in entries)
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
