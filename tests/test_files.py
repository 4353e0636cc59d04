"""grader.files.read_bounded: the one bounded read of a whole file, with the caller's error."""

from __future__ import annotations

from pathlib import Path

import pytest

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
