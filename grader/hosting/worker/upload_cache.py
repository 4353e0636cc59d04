"""A worker's copies of the uploads it fetched last, by sha256: a sharded grade's jobs fetch their submission once per worker.

A sharded grade runs its submission in one job per shard (about 150 at CoIR's full scale) and each job needs the
whole upload. Fetched per job, a 90 MB model crossed the wire six times in a four-shard grade on one worker (the
coordinator's download, then each job's), each time costing the server the CPU to send it (taken from the other
worker's container when two share a machine) and the job its seconds. The worker now keeps the last :data:`KEEP`
uploads it fetched in a private folder (``mkdtemp``: 0700, made by this process, removed at its exit) and hands a job
a hard link to the copy (a copy across file systems).

A kept copy is used only after it hashes to the sha256 the job names: nothing read back from disk is trusted by its
name, so a copy changed on disk (by anything: the job's child reads the same inode) is dropped and fetched again. The
sha256 a job names is the server's word: only 64 lowercase hex digits name a file here (anything else is fetched and
not kept), so no name the server sends reaches outside the folder.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from grader.files import sha256_file

log = logging.getLogger("grader.worker")

#: How many uploads a worker keeps: the grade it runs jobs of now, and one more (a second sharded grade whose jobs
#: interleave with the first's). A worker's disk holds at most this many uploads besides its jobs' own.
KEEP = 2
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source``; a copy where they are on different file systems."""
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        shutil.copyfile(source, target)


class UploadCache:
    """The last :data:`KEEP` uploads this worker process fetched, each under its sha256 (least recently used dropped first)."""

    def __init__(self, parent: Path | None = None) -> None:
        self.parent = parent  # where its folder is made (None: the temporary folder)
        self._folder: Path | None = None
        self._owner = 0  # the process that made the folder: only it removes it
        self._recent: list[str] = []  # least recently used first
        self._lock = threading.Lock()

    def _made(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="grader-uploads-", dir=self.parent))
            self._owner = os.getpid()
            atexit.register(self.close)
        return self._folder

    def place(self, sha256: str, target: Path) -> bool:
        """Put the kept upload named ``sha256`` at ``target`` if one is kept and it still hashes to ``sha256``; whether it did.

        A kept copy that no longer hashes to its name is dropped (and ``target`` left absent): the caller fetches it.
        """
        with self._lock:
            if self._folder is None or sha256 not in self._recent:
                return False
            entry = self._folder / sha256
            try:
                _link_or_copy(entry, target)
                intact = sha256_file(target) == sha256
            except OSError as error:
                log.warning("the kept upload %s could not be used (%s): fetching it", sha256[:12], type(error).__name__)
                intact = False
            if not intact:
                target.unlink(missing_ok=True)
                self._drop(sha256)
                return False
            self._recent.remove(sha256)
            self._recent.append(sha256)
            return True

    def keep(self, sha256: str, source: Path) -> None:
        """Keep ``source``, an upload the caller checked hashes to ``sha256``, under that name (a name that is not a
        sha256 is not kept); the least recently used beyond :data:`KEEP` are dropped."""
        if not _SHA256.fullmatch(sha256):
            return
        with self._lock:
            folder = self._made()
            if sha256 in self._recent:
                self._recent.remove(sha256)
            else:
                entry = folder / sha256
                try:
                    entry.unlink(missing_ok=True)
                    _link_or_copy(source, entry)
                except OSError as error:  # a full disk: the next job fetches it again, nothing is wrong
                    log.warning("the upload %s could not be kept (%s)", sha256[:12], type(error).__name__)
                    entry.unlink(missing_ok=True)
                    return
            self._recent.append(sha256)
            while len(self._recent) > KEEP:
                self._drop(self._recent[0])

    def _drop(self, sha256: str) -> None:
        if sha256 in self._recent:
            self._recent.remove(sha256)
        if self._folder is not None:
            (self._folder / sha256).unlink(missing_ok=True)

    def kept(self) -> list[str]:
        """The sha256 of each kept upload, least recently used first."""
        with self._lock:
            return list(self._recent)

    def close(self) -> None:
        """Remove the folder and what it holds (only in the process that made it: a forked child's exit leaves it)."""
        if os.getpid() != self._owner:
            return
        with self._lock:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None
            self._recent.clear()


#: This worker process's kept uploads (its shard jobs run one at a time, the coordinator's download among them).
UPLOADS = UploadCache()
