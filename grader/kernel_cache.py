"""Where numba keeps the grader's compiled kernels between processes (exact search, ``docs/search.md``; TREC run scanning).

Compiling the kernels of :mod:`grader.retrieval.exact` takes seconds in every new
process. numba can cache the machine code on disk (``cache=True``), but by default
it writes next to the source, in the package's ``__pycache__``, which is
read-only where the grader is installed system-wide or runs in an image. So,
unless ``NUMBA_CACHE_DIR`` is already set, it is pointed at a folder of the
user's cache, ``$XDG_CACHE_HOME/grader/numba`` (``~/.cache/grader/numba``),
before numba reads its configuration.

numba's cache files are pickles: loading one runs what it says. The default
folder is therefore used only when it is a real folder (not a link) owned by this
user and writable by no one else; ``GRADER_NUMBA_CACHE=off``, a folder that fails that, or that cannot be
written, turns caching off (the kernels are compiled in memory, as without a
cache). A cache entry is reused only for the same source file contents, numba
version and CPU (numba keys entries by them), so a cached kernel is the kernel
that compiling would give: the same code, the same bits.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

#: The environment variable numba reads its cache folder from.
CACHE_ENV = "NUMBA_CACHE_DIR"

#: Set to ``off`` (or ``0``, ``no``, ``false``) to compile in memory in every process, caching nothing.
SWITCH_ENV = "GRADER_NUMBA_CACHE"


def default_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/grader/numba``, else ``~/.cache/grader/numba``; ``None`` without a home folder."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if base and os.path.isabs(base):
        return Path(base) / "grader" / "numba"
    home = os.environ.get("HOME", "").strip() or os.path.expanduser("~")
    if not home or not os.path.isabs(home) or home == "/":
        return None
    return Path(home) / ".cache" / "grader" / "numba"


def _private_folder(path: Path) -> bool:
    """Create ``path`` (0700) if missing; whether it is now a folder of ours, writable by us alone."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    return _writable(path)


def _writable(path: Path) -> bool:
    """Whether a file can be created in ``path`` (what numba itself tries before using a cache folder)."""
    try:
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def configure_numba_cache() -> bool:
    """Point numba at a usable cache folder; whether the kernels may be cached (``cache=True``).

    Call before the kernels are decorated (numba picks a function's cache folder
    then); if numba was imported already, its configuration is reread. An explicit ``NUMBA_CACHE_DIR`` is the user's choice and is
    kept (caching is off if it cannot be written).
    """
    if os.environ.get(SWITCH_ENV, "").strip().lower() in ("off", "0", "no", "false"):
        return False
    chosen = os.environ.get(CACHE_ENV, "").strip()
    if chosen:
        path = Path(chosen)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        return _writable(path)
    default = default_cache_dir()
    if default is None or not _private_folder(default):
        return False
    os.environ[CACHE_ENV] = str(default)
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba imported before this call: make it read the variable now
        config.reload_config()  # type: ignore[attr-defined]
    return True
