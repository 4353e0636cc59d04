"""A stable digest of a submission folder: what reports name as the subject."""

from __future__ import annotations

import os
from pathlib import Path

from grader.files import listing_digest, sha256_file


def file_listing(folder: Path) -> list[tuple[str, str]]:
    """``(relative posix path, sha256)`` of every regular file, sorted by path bytes."""
    entries: list[tuple[str, str]] = []
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            path = Path(root) / name
            entries.append((path.relative_to(folder).as_posix(), sha256_file(path)))
    entries.sort(key=lambda entry: entry[0].encode("utf-8"))
    return entries


def submission_digest(folder: Path) -> str:
    """sha256 over the lines ``<sha256>  <path>`` of every file (the ``sha256sum`` format).

    The digest depends only on file names and contents, not on timestamps,
    permissions or how the submission was packed, so the same submission as a
    folder, a tarball or a zip has one digest; ``sha256sum`` can reproduce it.
    """
    return listing_digest(file_listing(folder))
