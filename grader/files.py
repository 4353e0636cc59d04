"""Small file helpers shared by every subsystem: atomic writes, bounded reads and digests."""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
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


def read_bounded(
    path: str | os.PathLike[str], limit: int, refuse: Callable[[str], Exception], *, what: str = "file", follow_links: bool = True
) -> bytes:
    """The whole file at ``path``, which may hold at most ``limit`` bytes; no more than ``limit + 1`` are ever read.

    A file that cannot be read, is larger than ``limit`` bytes or, with ``follow_links=False``, is a
    symbolic link raises ``refuse(reason)``, ``reason`` a phrase such as ``cannot read the file: No such
    file or directory`` (``what`` names the file in it). The caller names the path and picks the
    error type: this module sits below :mod:`grader.errors`.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow_links:
            raise refuse(f"the {what} is a symbolic link, not a plain file") from None
        raise refuse(f"cannot read the {what}: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:  # a folder opens, and fails only when read
        raise refuse(f"cannot read the {what}: {error.strerror or error}") from None
    if len(data) > limit:
        raise refuse(f"the {what} is larger than {limit} bytes")
    return data


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


#: Files whose sha256 a process remembers (:func:`sha256_file_remembered`); the oldest is forgotten first.
_REMEMBERED_FILES = 4096
#: A file changed less than this long ago is not remembered: file times tick coarsely (a few ms), so a second write
#: of the same size within one tick would leave its version as it was (git's "racily clean" entries).
_SETTLED_NS = 2_000_000_000
_remembered: OrderedDict[tuple[int, ...], str] = OrderedDict()
_remembered_lock = threading.Lock()


def _version(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """What changes when a file's bytes do: its device and inode (another file), size, mtime and ctime in nanoseconds.

    A write sets both times; ``touch -d`` or ``os.utime`` can put the mtime back, but not the ctime, which only the
    kernel sets (to the time of the change).
    """
    status = os.stat(path)
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def sha256_file_remembered(path: str | os.PathLike[str]) -> str:
    """:func:`sha256_file`, hashed once per version of the file in this process (:func:`_version`): a long-lived
    server or worker names the same data files in every grade (hundreds of MB at CoIR's size), and a file rewritten,
    replaced or touched since is hashed again. A file that changed while it was hashed, or in the last two seconds
    (:data:`_SETTLED_NS`), is not remembered."""
    version = _version(path)
    with _remembered_lock:
        known = _remembered.get(version)
        if known is not None:
            _remembered.move_to_end(version)
            return known
    digest = sha256_file(path)
    settled = time.time_ns() - max(version[3], version[4]) >= _SETTLED_NS
    if settled and _version(path) == version:
        with _remembered_lock:
            _remembered[version] = digest
            while len(_remembered) > _REMEMBERED_FILES:
                _remembered.popitem(last=False)
    return digest


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
