"""The state folder: uploads, reports, host-only logs and the host key, under names the server chooses.

DIR/grader.sqlite3          the database (unless --database)
DIR/keys/grader.key, .pub   the host's signing key (0600) and its public half
DIR/uploads/<id>.tar.gz     accepted uploads; DIR/uploads/tmp/ holds uploads in progress
DIR/results/<id>/<attempt>/ report.json, report.dsse.json (signed); logs/ (host only);
                            public-part/ (a hidden grade's public-part report, signed at acceptance)
DIR/run/                    pid files of the local workers
DIR/worker-data/            the local workers' data copy: pseudonymous ids, no judgements (written at the first job)

Everything in it is the host's alone (private scores, uploads, keys): folders 0700, files 0600
(:meth:`StateDir.make_private` at start; the server then runs under umask 077, SQLite's -wal
and -shm files take the database file's mode).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.hosting.errors import RefusedSubmission
from grader.hosting.keyring.files import key_files
from grader.hosting.keyring.host_key import ensure_host_key

#: Modes of everything inside the state folder.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
#: The umask the server runs under, so that what it creates later is private too.
PRIVATE_UMASK = 0o077

#: The folder of a result that holds its public-part report (the one participants download before the end).
PUBLIC_PART_DIR = "public-part"


@dataclass(frozen=True)
class StoredUpload:
    """An upload written completely to a temporary file."""

    path: Path
    sha256: str
    size: int


#: A note in the state folder: the competition file `grader serve` last ran with (admin commands default to it).
COMPETITION_NOTE = "competition-file"


def record_competition_file(root: Path, competition_file: Path) -> None:
    """Note ``competition_file``'s absolute path in the state folder ``root``."""
    (root / COMPETITION_NOTE).write_text(f"{competition_file.resolve()}\n", encoding="utf-8")


def recorded_competition_file(root: Path) -> Path | None:
    """The competition file `grader serve` last ran with in ``root``, if it noted one."""
    try:
        text = (root / COMPETITION_NOTE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(text) if text else None


class StateDir:
    """Paths inside the state folder, and the few operations on them."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.uploads = self.root / "uploads"
        self.tmp = self.uploads / "tmp"
        self.results = self.root / "results"
        self.keys = key_files(self.root).folder
        self.run = self.root / "run"
        for folder in (self.root, self.uploads, self.tmp, self.results, self.keys, self.run):
            folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
            os.chmod(folder, PRIVATE_DIR_MODE)

    def make_private(self) -> int:
        """Give every folder inside the state folder mode 0700 and every file 0600; return how many changed.

        Run at start, after the key, the secret and the database exist: a state folder of an
        earlier version (files 0644: private scores readable by any local user) is tightened too.
        Links are left alone (the server never makes one; chmod would follow it out).
        """
        changed = 0
        for folder, dirs, files in os.walk(self.root, followlinks=False):
            for name, wanted in [(folder, PRIVATE_DIR_MODE)] + [(os.path.join(folder, f), PRIVATE_FILE_MODE) for f in files]:
                mode = os.lstat(name).st_mode
                if not stat.S_ISLNK(mode) and stat.S_IMODE(mode) != wanted:
                    os.chmod(name, wanted)
                    changed += 1
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        return changed

    @property
    def host_key(self) -> Path:
        return key_files(self.root).host_private

    @property
    def host_pub(self) -> Path:
        return key_files(self.root).host_public

    def ensure_host_key(self) -> Ed25519PrivateKey:
        """Create the host's Ed25519 key pair on first start (private half 0600, optionally encrypted); load it."""
        return ensure_host_key(self.keys)

    def upload_path(self, submission_id: str) -> Path:
        return self.uploads / f"{submission_id}.tar.gz"

    def sketch_path(self, submission_id: str) -> Path:
        """Where the training sketch a hidden-track upload carried is kept, checked, for the server's contamination audit."""
        return self.uploads / f"{submission_id}.sketch"

    def result_dir(self, submission_id: str, attempt: int) -> Path:
        return self.results / submission_id / str(attempt)

    @property
    def worker_data(self) -> Path:
        """The local workers' copy of the benchmark data, under pseudonymous ids (:mod:`grader.hosting.protocol.worker_data`)."""
        return self.root / "worker-data"

    @property
    def blinded_documents(self) -> Path:
        """Each task's documents under the competition's blinding key, kept for scoring (:mod:`grader.grading.blinded_documents`)."""
        return self.root / "scoring" / "blinded-documents"

    def runs_dir(self, submission_id: str, attempt: int) -> Path:
        """Where the compact runs a worker put for an attempt wait to be scored (and are kept for re-scoring)."""
        return self.root / "runs" / submission_id / str(attempt)

    def parked_result(self, submission_id: str, attempt: int) -> Path:
        """Where a replicated job's majority result waits while a dissenter re-runs its grade (its sha256 is in the database)."""
        return self.root / "parked" / submission_id / f"{attempt}.json"

    def runs_held(self) -> tuple[int, int, int]:
        """(submissions, compact runs, bytes) of the workers' runs kept in ``runs/`` (bounded by ``[retention]``: grader.hosting.services.retention)."""
        folder = self.root / "runs"
        if not folder.is_dir():
            return 0, 0, 0
        runs = [path for path in folder.glob("*/*/*.run") if path.is_file() and not path.is_symlink()]
        return len({path.parent.parent.name for path in runs}), len(runs), sum(path.stat().st_size for path in runs)

    def public_part_dir(self, submission_id: str, attempt: int) -> Path:
        """Where the public-part report of a scored hidden-split result is signed at its acceptance."""
        return self.result_dir(submission_id, attempt) / PUBLIC_PART_DIR

    @staticmethod
    def public_part_of(envelope_path: str | Path) -> Path:
        """The public-part folder of the result signed at ``envelope_path``: beside it (an acceptance's, or a re-scoring's own folder)."""
        return Path(envelope_path).parent / PUBLIC_PART_DIR

    def clean_tmp(self) -> int:
        """Remove uploads a crash left half-written; return how many."""
        count = 0
        for path in self.tmp.iterdir():
            path.unlink(missing_ok=True) if path.is_file() else shutil.rmtree(path, ignore_errors=True)
            count += 1
        return count

    def clean_orphans(self, known_ids: set[str]) -> int:
        """Remove accepted-upload files no submission row names (a crash between rename and commit)."""
        count = 0
        for path in self.uploads.glob("*.tar.gz"):
            if path.name.removesuffix(".tar.gz") not in known_ids:
                path.unlink(missing_ok=True)
                count += 1
        return count

    async def receive(self, chunks: AsyncIterator[bytes], max_bytes: int) -> StoredUpload:
        """Write a streamed upload to a temporary file, refusing it as soon as it passes ``max_bytes``.

        Nothing beyond the cap is written, and a refused or broken upload leaves no file.
        """
        path = self.tmp / f"{secrets.token_hex(12)}.tar.gz"
        digest = hashlib.sha256()
        size = 0
        try:
            with open(path, "xb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise RefusedSubmission(f"upload larger than the competition's cap of {max_bytes} bytes", status=413)
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return StoredUpload(path, digest.hexdigest(), size)
