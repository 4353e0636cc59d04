"""A participant's training texts, read for ``grader sketch-training``: files, folders and JSONL corpora.

* A file ending ``.jsonl`` (or ``.jsonl.gz``, gzip-compressed): one JSON object per line with a string
  ``text`` and an optional string ``title`` (a BEIR corpus line); the text sketched is ``title + " " + text``, stripped, as an encoder sees a document.
* Any other file: its whole content is one text (UTF-8; a file that is not UTF-8 is skipped and counted).
* A folder: every regular file under it, in byte order of the path (symbolic links are not followed, so a link
  loop cannot trap the walk and the order is stable).

Files are read in the order given, then folder contents in path order, so the same inputs always give the same
texts. A plain file is read whole up to :data:`MAX_FILE_BYTES`; a larger one is refused (one line).
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader import jsonio
from grader.data.task import document_text
from grader.errors import InputError
from grader.files import read_bounded

#: Largest plain training file read whole, in bytes.
MAX_FILE_BYTES = 64 << 20


class TrainingDataError(InputError):
    """A training file given to ``grader sketch-training`` is unreadable or malformed (exit 2)."""


@dataclass
class ReadCounts:
    """What the walk saw: files read, files skipped (not UTF-8) and texts yielded."""

    files: int = 0
    skipped: list[str] = field(default_factory=list)
    texts: int = 0


def training_files(paths: Sequence[Path]) -> list[Path]:
    """Every file to read, in the documented order; a path that does not exist is refused."""
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise TrainingDataError("no such file or folder", path=path)
        if path.is_dir():
            found: list[Path] = []
            for root, _dirs, names in os.walk(path, followlinks=False):
                candidates = (Path(root) / name for name in names)
                found.extend(item for item in candidates if not item.is_symlink() and item.is_file())
            files.extend(sorted(found, key=lambda item: os.fsencode(item)))
        else:
            files.append(path)
    return files


def _decoded(handle: Iterable[bytes], on_bytes: Callable[[int], None], position: Callable[[], int]) -> Iterator[str]:
    """The lines of a binary handle as text; ``on_bytes`` told how far ``position()`` (bytes of the file on disk) moved."""
    last = 0
    for raw in handle:
        now = position()
        on_bytes(now - last)
        last = now
        yield raw.decode("utf-8")
    on_bytes(position() - last)  # what the last read took beyond the last line (a gzip stream's trailer)


def _jsonl_texts(path: Path, on_bytes: Callable[[int], None]) -> Iterator[str]:
    try:
        with path.open("rb") as disk:
            # A .jsonl.gz corpus is read through gzip; progress follows the compressed bytes read from disk.
            lines: Iterable[bytes] = gzip.GzipFile(fileobj=disk, mode="rb") if path.name.endswith(".gz") else disk
            for line, record in jsonio.iter_objects(_decoded(lines, on_bytes, disk.tell), path=path, error=TrainingDataError):
                text = record.get("text")
                title = record.get("title", "")
                if not isinstance(text, str):
                    raise TrainingDataError("expected a string", path=path, line=line, field="text")
                if not isinstance(title, str):
                    raise TrainingDataError("expected a string", path=path, line=line, field="title")
                yield document_text(title, text)
    except (OSError, EOFError) as error:  # gzip raises BadGzipFile (an OSError) or EOFError on a broken stream
        raise TrainingDataError(f"cannot read the file: {getattr(error, 'strerror', None) or error}", path=path) from None


def _file_texts(path: Path, counts: ReadCounts, on_bytes: Callable[[int], None]) -> Iterator[str]:
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        yield from _jsonl_texts(path, on_bytes)
        return
    data = read_bounded(path, MAX_FILE_BYTES, lambda reason: TrainingDataError(reason, path=path), what="training file")
    on_bytes(len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        counts.skipped.append(str(path))
        return
    yield text


def total_bytes(files: Sequence[Path]) -> int:
    """The files' sizes added up: the total that progress counts towards."""
    return sum(path.stat().st_size for path in files)


def _ignore(_count: int) -> None:
    return None


def iter_training_texts(files: Sequence[Path], counts: ReadCounts, *, on_bytes: Callable[[int], None] = _ignore) -> Iterator[str]:
    """The texts of ``files`` in order, counting what was read into ``counts``; ``on_bytes(n)`` as ``n`` more bytes
    are read (line by line in a JSONL file, so progress moves within a large corpus)."""
    for path in files:
        counts.files += 1
        for text in _file_texts(path, counts, on_bytes):
            counts.texts += 1
            yield text
