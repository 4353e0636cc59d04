"""The one JSON I/O of the grader: strict parsing, JSONL iteration with ``file:line`` errors, atomic writes.

Every JSON document the grader reads, trusted or not, goes through :func:`loads`:

* duplicate keys in one object are refused (a first-key-wins consumer and a
  last-key-wins one would otherwise read different values from the same bytes);
* ``NaN``, ``Infinity`` and ``-Infinity`` literals are refused (they are not JSON);
* nesting is bounded (:data:`MAX_DEPTH`): a line nested 200,000 brackets deep is
  a clean error, never a ``RecursionError`` here or later in code that walks the value;
* the size is bounded where the caller gives ``max_bytes``;
* bytes must be UTF-8.

A failure raises :class:`JsonError` (a :class:`ValueError`, not a
:class:`~grader.errors.GraderError`): each caller turns it into its own error
type with :meth:`JsonError.raise_as`, since the same fault is a ``RunFormatError``
in a run, a ``DataError`` in a corpus and a ``VerificationError`` in an envelope.

Writers: :func:`dumps` (no NaN, UTF-8) and :func:`write_json` (atomic: a temporary
file in the same folder, flushed, renamed over the target).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from grader.errors import InputError
from grader.files import atomic_write_bytes

#: Deepest nesting of arrays and objects accepted. The grader's own formats need 4.
MAX_DEPTH = 64


class JsonError(ValueError):
    """A JSON text was refused; ``what`` says why, ``line``/``column`` where (1-based) when known."""

    def __init__(self, what: str, *, line: int | None = None, column: int | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.line = line
        self.column = column

    def raise_as(self, error: type[InputError], *, path: str | os.PathLike[str] | None, line: int | None = None) -> NoReturn:
        """Raise ``error(what, path=path, line=...)``: the line given (a JSONL line) wins over the parser's."""
        what = self.what if self.column is None else f"{self.what} (column {self.column})"
        raise error(what, path=path, line=line if line is not None else self.line) from None


def _reject_constant(name: str) -> Any:
    raise JsonError(f"{name} is not a valid score (scores must be finite numbers)")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                from grader.text import quote_id

                raise JsonError(f"key {quote_id(key)} appears twice in one object")
            seen.add(key)
    return result


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise :class:`JsonError` if ``value`` nests arrays/objects deeper than ``max_depth`` (iteratively: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) is dict or type(child) is list:
                if depth + 1 > max_depth:
                    raise JsonError(f"nested deeper than {max_depth} levels")
                stack.append((child, depth + 1))


def loads(data: str | bytes, *, max_depth: int | None = MAX_DEPTH, max_bytes: int | None = None) -> Any:
    """Parse one strict JSON document (see the module's rules); :class:`JsonError` if refused.

    ``max_depth=None`` skips the depth walk for callers that check a fixed shape
    themselves (a run line that passes its structural check has depth 3); the
    parser's own recursion is still caught.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise JsonError(f"larger than {max_bytes} bytes")
    if isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(data, parse_constant=_reject_constant, object_pairs_hook=_unique_pairs)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise JsonError("nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal with more digits than Python converts
        raise JsonError(f"invalid JSON: {exc}") from None
    if max_depth is not None and (type(value) is dict or type(value) is list):
        check_depth(value, max_depth)
    return value


def load_file(path: str | os.PathLike[str], *, max_bytes: int | None = None, max_depth: int | None = MAX_DEPTH) -> Any:
    """Read and parse a JSON file; :class:`JsonError` if refused, ``OSError`` if unreadable.

    With ``max_bytes``, at most that many bytes (plus one) are ever read.
    """
    with open(path, "rb") as handle:
        data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    return loads(data, max_bytes=max_bytes, max_depth=max_depth)


def load_file_as(path: str | os.PathLike[str], error: type[InputError], *, max_bytes: int | None = None) -> Any:
    """The JSON value in the file at ``path``: :func:`load_file` with its failures raised as ``error`` naming ``path``.

    For a value whose shape a schema checks next; :func:`load_object` when it must be an object.
    """
    try:
        return load_file(path, max_bytes=max_bytes)
    except JsonError as failure:
        failure.raise_as(error, path=path)
    except OSError as failure:
        raise error(f"cannot read: {failure.strerror or failure}", path=path) from None


def load_object(
    path: str | os.PathLike[str], error: type[InputError], *, expected: str = "expected a JSON object", max_bytes: int | None = None
) -> dict[str, Any]:
    """The JSON object in the file at ``path``, or ``error`` naming ``path``.

    The file must be readable, strict JSON (see the module's rules) and an object; ``expected`` is
    the message when it is some other value, so it can say which object was wanted.
    """
    value = load_file_as(path, error, max_bytes=max_bytes)
    if type(value) is not dict:
        raise error(expected, path=path)
    return value


def iter_lines(lines: Iterable[str], *, max_depth: int | None = MAX_DEPTH) -> Iterator[tuple[int, Any]]:
    """``(line_number, value)`` of each non-blank JSONL line; :class:`JsonError` carries the line number."""
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = loads(line, max_depth=max_depth)
        except JsonError as error:
            error.line = line_number
            raise
        yield line_number, value


def iter_objects(
    lines: Iterable[str], *, path: str | os.PathLike[str], error: type[InputError], max_depth: int | None = MAX_DEPTH
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line_number, object)`` of each non-blank JSONL line; anything else raises ``error`` naming ``path:line``.

    ``UnicodeDecodeError`` from the text below becomes ``error`` too.
    """
    try:
        iterator = iter_lines(lines, max_depth=max_depth)
        while True:
            try:
                line_number, value = next(iterator)
            except StopIteration:
                return
            except JsonError as failure:
                failure.raise_as(error, path=path, line=failure.line)
            if type(value) is not dict:
                raise error("expected a JSON object", path=path, line=line_number)
            yield line_number, value
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text: {exc.reason}", path=path) from None


def dumps(value: Any, *, indent: int | None = None, sort_keys: bool = False, ensure_ascii: bool = False) -> str:
    """Standard JSON text of ``value``: ``ValueError`` on NaN or infinity, never a non-JSON literal."""
    return json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii, allow_nan=False)


def write_json(
    path: str | os.PathLike[str], value: Any, *, indent: int | None = 2, sort_keys: bool = False, ensure_ascii: bool = False, mode: int | None = None
) -> Path:
    """Write ``value`` as JSON plus a newline to ``path`` atomically (readers see the old file or the whole new one).

    ``mode`` sets the permission bits (the temporary file is created 0600); a file another user or a container reads needs 0o644.
    """
    text = dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    return atomic_write_bytes(path, (text + "\n").encode("utf-8"), mode=mode)
