"""``grader archive`` (issue 34 item 1): the archive a browser user chooses on the upload form is what ``grader submit`` sends.

The real command in a subprocess, on the example ONNX submission; the expected members are the folder's own
files, listed here by walking it, and the archive ``grader submit`` packs comes from the function its upload reads.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from grader.hosting.participant.client import packed
from tests.hosting.support import REPO, grader_cli

pytestmark = pytest.mark.slow  # the real command, in a subprocess

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: Past the files' own bytes, what a .tar.gz may add: a 512-byte header a member, the end blocks, gzip's framing.
OVERHEAD = 64 << 10


def _contents(archive: Path) -> dict[str, bytes]:
    """Each member of ``archive`` (all plain files) and its bytes."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        assert all(member.isfile() for member in members), [member.name for member in members if not member.isfile()]
        return {member.name: tar.extractfile(member).read() for member in members}  # type: ignore[union-attr]


def test_the_archive_holds_the_submissions_files_as_grader_submit_packs_them(tmp_path: Path) -> None:
    target = tmp_path / "upload.tar.gz"
    done = grader_cli("archive", str(EXAMPLE), str(target), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{target}: {target.stat().st_size} bytes\n"
    files = {path.relative_to(EXAMPLE).as_posix(): path.read_bytes() for path in EXAMPLE.rglob("*") if path.is_file()}
    assert "submission.json" in files and "model.onnx" in files
    written = _contents(target)
    assert written == files  # every file, byte for byte, under its path in the folder; nothing else
    assert target.stat().st_size <= sum(len(data) for data in files.values()) + OVERHEAD
    with packed(EXAMPLE) as uploaded:  # what `grader submit` sends (gzip stamps its own time: compared member by member)
        assert _contents(uploaded) == written


def test_a_folder_that_is_no_submission_or_a_target_that_exists_gets_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    target = tmp_path / "upload.tar.gz"
    refused = grader_cli("archive", str(empty), str(target), timeout=120)
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.splitlines() == ["error: invalid submission: empty: missing submission.json at the submission's root"]
    assert not target.exists()  # nothing half-written
    target.write_bytes(b"kept")
    taken = grader_cli("archive", str(EXAMPLE), str(target), timeout=120)
    assert taken.returncode != 0 and taken.stderr.splitlines() == [f"error: {target} already exists; choose a new file"]
    assert target.read_bytes() == b"kept"  # never overwritten
