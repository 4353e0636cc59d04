"""grader.files: the one bounded read of a whole file, with the caller's error; a file's digest remembered per version."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

import grader.files as files
from grader.errors import VerificationError
from grader.files import read_bounded


def _refuse(reason: str) -> VerificationError:
    return VerificationError(reason)


def test_a_file_up_to_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"12345")
    assert read_bounded(path, 5, _refuse) == b"12345"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path.write_bytes(b"123456"), r"^the proof is larger than 5 bytes$"),
        (lambda path: None, r"^cannot read the proof: No such file or directory$"),
        (lambda path: path.mkdir(), r"^cannot read the proof: Is a directory$"),
    ],
)
def test_what_cannot_be_read_whole_raises_the_callers_error(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "f"
    make(path)
    with pytest.raises(VerificationError, match=message):
        read_bounded(path, 5, _refuse, what="proof")


def test_a_link_is_followed_unless_refused(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"data")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")
    assert read_bounded(link, 10, _refuse) == b"data"
    with pytest.raises(VerificationError, match=r"^the file is a symbolic link, not a plain file$"):
        read_bounded(link, 10, _refuse, follow_links=False)


def test_a_settled_files_digest_is_remembered_until_any_write_however_its_times_are_put_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[str] = []
    real = files.sha256_file
    monkeypatch.setattr(files, "sha256_file", lambda path: hashed.append(str(path)) or real(path))
    monkeypatch.setattr(files, "_SETTLED_NS", 0)  # this file is new: remember it at once
    data = tmp_path / "corpus.jsonl"
    data.write_bytes(b'{"_id": "d1", "text": "a"}\n')
    first = files.sha256_file_remembered(data)
    assert first == hashlib.sha256(data.read_bytes()).hexdigest() and files.sha256_file_remembered(data) == first
    assert len(hashed) == 1
    before = os.stat(data)
    time.sleep(0.05)  # past the file system's clock tick: the write below gets another ctime
    data.write_bytes(b'{"_id": "d1", "text": "b"}\n')  # the same size
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime as before
    assert files.sha256_file_remembered(data) == hashlib.sha256(data.read_bytes()).hexdigest() != first
    assert len(hashed) == 2


def test_a_file_written_a_moment_ago_is_hashed_each_time(tmp_path: Path) -> None:
    # Two writes of one size within a clock tick can leave the same times: such a file is not remembered yet.
    data = tmp_path / "queries.jsonl"
    data.write_bytes(b"x" * 64)
    assert files.sha256_file_remembered(data) == hashlib.sha256(b"x" * 64).hexdigest()
    before = os.stat(data)
    data.write_bytes(b"y" * 64)
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert files.sha256_file_remembered(data) == hashlib.sha256(b"y" * 64).hexdigest()
