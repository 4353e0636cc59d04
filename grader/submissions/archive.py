"""Opening a submission safely: a folder, a ``.tar.gz`` or a ``.zip``.

Archives come from people we do not trust, so unpacking refuses absolute paths,
``..`` segments, links, devices and anything but regular files and folders, and
stops at a total size and a file count. Folders are checked the same way: no
symbolic links anywhere, so nothing a submission names can point outside it.
"""

from __future__ import annotations

import contextlib
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.errors import SubmissionError


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds on what an archive may unpack to."""

    max_total_bytes: int = 4 << 30
    max_files: int = 10_000


#: Deepest member path (folders) and longest member name an archive may hold. Real submissions nest a
#: few folders; a member 2,000 folders deep made the recursive folder creation raise RecursionError (a 500).
MAX_MEMBER_DEPTH = 32
MAX_MEMBER_NAME_CHARS = 1024
MAX_SEGMENT_CHARS = 255

#: What any archive may unpack to whatever its compressed size: small archives of text compress far better than 20:1.
MIN_UNPACK_ALLOWANCE = 1 << 20


def unpack_limits(compressed_bytes: int, *, ratio: float, cap: int) -> ArchiveLimits:
    """The bounds of an archive of ``compressed_bytes``: ``ratio`` times that (1 MiB at least), never past ``cap``.

    A gzip bomb (a few MB that unpack to gigabytes) is refused after ``ratio`` times
    its size was written, not after the absolute cap. The server applies it at intake
    and the worker again when it unpacks the upload a second time.
    """
    return ArchiveLimits(max_total_bytes=min(cap, max(int(ratio * compressed_bytes), MIN_UNPACK_ALLOWANCE)))


def _check_member_name(name: str, *, archive: Path) -> PurePosixPath:
    if len(name) > MAX_MEMBER_NAME_CHARS:
        raise SubmissionError(
            f"archive member name {name[:60]!r}... is {len(name)} characters, over the limit of {MAX_MEMBER_NAME_CHARS}", path=archive
        )
    path = PurePosixPath(name)
    if len(path.parts) > MAX_MEMBER_DEPTH:
        raise SubmissionError(f"archive member {name[:60]!r}... is {len(path.parts)} levels deep, over the limit of {MAX_MEMBER_DEPTH}", path=archive)
    if any(len(part) > MAX_SEGMENT_CHARS for part in path.parts):
        raise SubmissionError(f"archive member {name[:60]!r}... has a path segment over {MAX_SEGMENT_CHARS} characters", path=archive)
    if path.is_absolute() or name.startswith("/") or "\\" in name:
        raise SubmissionError(f"archive member {name!r} has an absolute or Windows path", path=archive)
    if any(part == ".." for part in path.parts):
        raise SubmissionError(f"archive member {name!r} contains '..'", path=archive)
    if "\x00" in name:
        raise SubmissionError(f"archive member {name!r} contains NUL", path=archive)
    return path


def _unpack_tar(archive: Path, dest: Path, limits: ArchiveLimits) -> None:
    total = 0
    count = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                relative = _check_member_name(member.name, archive=archive)
                if member.issym() or member.islnk():
                    raise SubmissionError(f"archive member {member.name!r} is a link; links are not allowed", path=archive)
                if not (member.isfile() or member.isdir()):
                    raise SubmissionError(f"archive member {member.name!r} is not a regular file or folder", path=archive)
                count += 1
                if count > limits.max_files:
                    raise SubmissionError(f"archive holds more than {limits.max_files} entries", path=archive)
                target = dest / relative
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                total += member.size
                if total > limits.max_total_bytes:
                    raise SubmissionError(f"archive unpacks to more than {limits.max_total_bytes} bytes", path=archive)
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is None:  # pragma: no cover - isfile() members always have data
                    raise SubmissionError(f"archive member {member.name!r} has no data", path=archive)
                with source, open(target, "xb") as out:
                    shutil.copyfileobj(source, out)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise SubmissionError(f"not a readable tar archive: {exc}", path=archive) from None


def _unpack_zip(archive: Path, dest: Path, limits: ArchiveLimits) -> None:
    try:
        with zipfile.ZipFile(archive) as bundle:
            infos = bundle.infolist()
            if len(infos) > limits.max_files:
                raise SubmissionError(f"archive holds more than {limits.max_files} entries", path=archive)
            total = 0
            for info in infos:
                relative = _check_member_name(info.filename, archive=archive)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise SubmissionError(f"archive member {info.filename!r} is a link; links are not allowed", path=archive)
                target = dest / relative
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                total += info.file_size
                if total > limits.max_total_bytes:
                    raise SubmissionError(f"archive unpacks to more than {limits.max_total_bytes} bytes", path=archive)
                target.parent.mkdir(parents=True, exist_ok=True)
                written = 0
                with bundle.open(info) as source, open(target, "xb") as out:
                    # Count real bytes: a forged header size must not defeat the bound.
                    for chunk in iter(lambda: source.read(1 << 20), b""):
                        written += len(chunk)
                        if written > info.file_size or total - info.file_size + written > limits.max_total_bytes:
                            raise SubmissionError(f"archive member {info.filename!r} is larger than it declares", path=archive)
                        out.write(chunk)
    # zipfile lets decoder errors (zlib, lzma), unsupported methods, encrypted members
    # (RuntimeError) and undecodable UTF-8 names escape as other exception types.
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError, UnicodeDecodeError, zlib.error, lzma.LZMAError) as exc:
        raise SubmissionError(f"not a readable zip archive: {exc}", path=archive) from None


def check_folder(folder: Path) -> None:
    """Refuse a submission folder that contains links or special files."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = Path(root) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise SubmissionError("symbolic links are not allowed in a submission", path=path)
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise SubmissionError("only regular files and folders are allowed in a submission", path=path)


def _root_of(unpacked: Path) -> Path:
    """The folder holding submission.json: the top, or its single sub-folder."""
    if (unpacked / "submission.json").is_file():
        return unpacked
    entries = [p for p in unpacked.iterdir()]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / "submission.json").is_file():
        return entries[0]
    return unpacked


@contextlib.contextmanager
def open_submission(path: str | Path, limits: ArchiveLimits = ArchiveLimits()) -> Iterator[Path]:
    """Yield the folder of a submission (unpacking an archive into a temporary folder)."""
    path = Path(path)
    if path.is_symlink():
        raise SubmissionError("the submission must not be a symbolic link", path=path)
    if path.is_dir():
        check_folder(path)
        yield path
        return
    if not path.is_file():
        raise SubmissionError("submission not found", path=path)
    name = path.name.lower()
    if not (name.endswith((".tar.gz", ".tgz", ".tar")) or name.endswith(".zip")):
        raise SubmissionError("a submission is a folder, a .tar.gz/.tgz/.tar or a .zip", path=path)
    with tempfile.TemporaryDirectory(prefix="grader-submission-") as tmp:
        dest = Path(tmp)
        if name.endswith(".zip"):
            _unpack_zip(path, dest, limits)
        else:
            _unpack_tar(path, dest, limits)
        _normalise_modes(dest)
        yield _root_of(dest)


def _normalise_modes(folder: Path) -> None:
    """Give the unpacked tree plain modes (0755 folders, 0644 files).

    The archive's own modes are not trusted (no setuid, no private files), and
    the sandbox's unprivileged user must be able to read the tree, which is
    mounted read-only at ``/submission``. The temporary parent stays 0700.
    """
    for entry in [folder, *folder.rglob("*")]:
        if not entry.is_symlink():
            entry.chmod(0o755 if entry.is_dir() else 0o644)
