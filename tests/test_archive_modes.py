"""Unpacked submissions get plain modes: readable by the sandbox's user, no setuid from the archive."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

from grader.submissions.archive import open_submission


def _tar_with_modes(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, mode in (("submission.json", 0o600), ("model.onnx", 0o4755), ("sub/tokenizer.json", 0o000)):
            data = b"{}"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))


def test_unpacked_tree_is_world_readable_and_has_no_special_bits(tmp_path: Path) -> None:
    archive = tmp_path / "s.tar.gz"
    _tar_with_modes(archive)
    with open_submission(archive) as folder:
        modes = {p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}
    assert modes == {".": 0o755, "submission.json": 0o644, "model.onnx": 0o644, "sub": 0o755, "sub/tokenizer.json": 0o644}
