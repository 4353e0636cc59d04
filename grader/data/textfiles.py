"""Streaming readers for the text files of a task: JSONL and TSV, plain or gzip."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from grader import jsonio
from grader.errors import DataError


def open_text(path: Path) -> IO[str]:
    """Open ``path`` for reading UTF-8 text, transparently decompressing ``.gz``."""
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
        return open(path, encoding="utf-8", newline="")
    except OSError as exc:
        raise DataError(f"cannot open: {exc.strerror or exc}", path=path) from exc


def find_data_file(folder: Path, name: str) -> Path | None:
    """Return ``folder/name`` or ``folder/name.gz``, whichever exists, else ``None``."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    Lines are parsed strictly (:func:`grader.jsonio.loads`: no duplicate keys, no
    NaN literals, bounded depth); a line that is not such a JSON object raises
    :class:`DataError` naming the line.
    """
    with open_text(path) as handle:
        try:
            yield from jsonio.iter_objects(handle, path=path, error=DataError)
        except (EOFError, gzip.BadGzipFile) as exc:
            raise DataError(f"unreadable: {exc}", path=path) from None


def require_string(record: dict[str, Any], field: str, *, path: Path, line: int, allow_empty: bool = True) -> str:
    """Return ``record[field]`` if it is a string, else raise a :class:`DataError` naming it."""
    if field not in record:
        raise DataError("missing field", path=path, line=line, field=field)
    value = record[field]
    if not isinstance(value, str):
        raise DataError(f"expected a string, got {type(value).__name__}", path=path, line=line, field=field)
    if not allow_empty and not value:
        raise DataError("must not be empty", path=path, line=line, field=field)
    return value


def iter_tsv(path: Path, *, header: tuple[str, ...] | None) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_number, fields)`` for each non-blank line of a tab-separated file.

    With ``header``, the first line must be exactly that header and is skipped.
    """
    with open_text(path) as handle:
        try:
            for line_number, line in enumerate(handle, start=1):
                stripped = line.rstrip("\r\n")
                if line_number == 1 and header is not None:
                    if tuple(stripped.split("\t")) != header:
                        expected = "\\t".join(header)
                        raise DataError(f"expected the header {expected!r}", path=path, line=1)
                    continue
                if not stripped.strip():
                    continue
                yield line_number, stripped.split("\t")
        except (UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
            raise DataError(f"unreadable: {exc}", path=path) from None
