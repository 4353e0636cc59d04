"""A TREC run read by blocks of whole queries, its lines split by a compiled scanner.

The scanner splits fields where trec_eval does (C's ``isspace()``: runs of
spaces, tabs, vertical tabs and form feeds; LF, CRLF and a lone CR end a line,
as the line reader's universal newlines do), skips blank and comment lines
(first character after any blanks ``#``) and records, per line, where the query
id and the doc id lie in the block, a 64-bit hash of the doc id and the score.

It never decides a refusal: whatever it cannot take (a short line, a NUL in an
id, a score that is not a number or not finite, bytes that are not UTF-8) makes
:meth:`RawBlock.scan` raise :class:`NotScannable`, and the caller reads the file
again with the line reader, which names the file, line and field as it always
has. So every refusal message is the line reader's own.

Scores: a plain decimal (``[+-]digits[.digits][e[+-]digits]``) whose significant
digits make an integer of at most 2^53 and whose power of ten is within 10^±22 is converted in the
scanner, exactly (Clinger's fast path: both operands are exact doubles, so the
one multiplication or division rounds correctly). Any other score text is
copied aside and converted by Arrow's parser (correctly rounded too, and the one
today's Arrow reader used), so every score is the double the other readers give.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.kernel_cache import configure_numba_cache

#: Whether the kernels are cached on disk; decided before numba reads its configuration.
CACHE = configure_numba_cache()

import numba  # noqa: E402 - after NUMBA_CACHE_DIR is set
import numpy as np  # noqa: E402

#: Bytes read at a time. A block is cut after its last whole query; a query longer than the block widens it.
BLOCK_BYTES = 1 << 25

# The scanner's statuses.
OK = 0
SHORT_LINE = 1  # fewer than six fields
NUL_IN_ID = 2  # a NUL byte inside a query or doc id

_SP, _TAB, _LF, _VT, _FF, _CR, _HASH = 32, 9, 10, 11, 12, 13, 35
_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
#: 10**k for k <= 22, each exact in a double (float(int) converts exactly when it can).
_POWERS_OF_TEN = np.array([float(10**k) for k in range(23)], dtype=np.float64)
_EXACT_MANTISSA = 1 << 53
# Each byte's class for the scanner: below _BLANK a byte is inside a field (a non-ASCII byte and NUL
# too, as the line reader splits; they are flags, or-ed together per field), then separators.
_IN_FIELD, _HIGH, _NUL, _BLANK, _LINE_END = 0, 1, 2, 3, 4
_CLASSES = np.zeros(256, dtype=np.uint8)
_CLASSES[[_SP, _TAB, _VT, _FF]] = _BLANK
_CLASSES[[_LF, _CR]] = _LINE_END
_CLASSES[0] = _NUL
_CLASSES[0x80:] = _HIGH


class NotScannable(Exception):
    """The block reader cannot take this file (or found something to refuse): read it with the line reader."""


@numba.njit(cache=CACHE, nogil=True)
def fnv1a(data: np.ndarray, start: int, length: int) -> np.uint64:  # pragma: no cover - compiled
    """FNV-1a 64 of ``data[start:start+length]`` (the hash the scanner gives each doc id)."""
    h = _FNV_OFFSET
    for i in range(start, start + length):
        h = (h ^ np.uint64(data[i])) * _FNV_PRIME
    return h


@numba.njit(cache=CACHE, nogil=True, inline="always")
def _fast_score(data: np.ndarray, start: int, end: int, powers: np.ndarray) -> tuple[bool, float]:  # pragma: no cover - compiled
    """``(True, value)`` for a plain decimal on Clinger's fast path, else ``(False, 0.0)``."""
    j = start
    negative = False
    if data[j] == 43 or data[j] == 45:  # '+' '-'
        negative = data[j] == 45
        j += 1
    mantissa = 0
    digits = 0  # significant digits kept in mantissa
    exponent = 0
    any_digit = False
    while j < end and 48 <= data[j] <= 57:
        any_digit = True
        d = data[j] - 48
        if mantissa != 0 or d != 0:
            if digits >= 16:
                return False, 0.0
            mantissa = mantissa * 10 + d
            digits += 1
        j += 1
    if j < end and data[j] == 46:  # '.'
        j += 1
        while j < end and 48 <= data[j] <= 57:
            any_digit = True
            d = data[j] - 48
            if mantissa != 0 or d != 0:
                if digits >= 16:
                    return False, 0.0
                mantissa = mantissa * 10 + d
                digits += 1
            exponent -= 1
            j += 1
    if not any_digit:
        return False, 0.0
    if j < end and (data[j] == 101 or data[j] == 69):  # 'e' 'E'
        j += 1
        negative_exponent = False
        if j < end and (data[j] == 43 or data[j] == 45):
            negative_exponent = data[j] == 45
            j += 1
        if j >= end:
            return False, 0.0
        written = 0
        while j < end and 48 <= data[j] <= 57:
            if written > 1000:
                return False, 0.0
            written = written * 10 + (data[j] - 48)
            j += 1
        exponent += -written if negative_exponent else written
    if j != end:
        return False, 0.0
    if mantissa == 0:
        return True, -0.0 if negative else 0.0
    if mantissa > _EXACT_MANTISSA or exponent < -22 or exponent > 22:
        return False, 0.0
    value = float(mantissa) * powers[exponent] if exponent >= 0 else float(mantissa) / powers[-exponent]
    return True, -value if negative else value


@numba.njit(cache=CACHE, nogil=True)
def scan_lines(
    data: np.ndarray,
    size: int,
    query_start: np.ndarray,
    query_length: np.ndarray,
    doc_start: np.ndarray,
    doc_length: np.ndarray,
    doc_hash: np.ndarray,
    scores: np.ndarray,
    slow: np.ndarray,
    powers: np.ndarray,
    classes: np.ndarray,
) -> tuple[int, int, int, bool]:  # pragma: no cover - compiled
    """Split ``data[:size]`` into run lines; ``(lines, slow scores, status, whether any byte is non-ASCII)``.

    The score of line ``i`` goes to ``scores[i]`` when it is on the fast path;
    otherwise ``slow`` gets the triple (text start, text end, ``i``) for the caller
    to convert. Output arrays hold at least ``size // 12 + 1`` entries (a line of
    six fields takes at least twelve bytes; ``slow`` three times that).
    """
    i = 0
    count = 0
    n_slow = 0
    high = False
    h = _FNV_OFFSET
    while i < size:
        kind = classes[data[i]]
        if kind == _BLANK:
            i += 1
            continue
        if kind == _LINE_END:
            i += 1
            continue
        if data[i] == _HASH:
            flags = 0
            while i < size:
                kind = classes[data[i]]
                if kind == _LINE_END:
                    break
                flags |= kind
                i += 1
            high |= (flags & _HIGH) != 0
            continue
        fields = 0
        while True:
            start = i
            flags = 0
            if fields == 2:
                h = _FNV_OFFSET
                while i < size:
                    kind = classes[data[i]]
                    if kind >= _BLANK:
                        break
                    flags |= kind
                    h = (h ^ np.uint64(data[i])) * _FNV_PRIME
                    i += 1
            else:
                while i < size:
                    kind = classes[data[i]]
                    if kind >= _BLANK:
                        break
                    flags |= kind
                    i += 1
            high |= (flags & _HIGH) != 0
            if (flags & _NUL) != 0 and (fields == 0 or fields == 2):
                return count, n_slow, NUL_IN_ID, high
            if fields == 0:
                query_start[count] = start
                query_length[count] = i - start
            elif fields == 2:
                doc_start[count] = start
                doc_length[count] = i - start
                doc_hash[count] = h
            elif fields == 4:
                fast, value = _fast_score(data, start, i, powers)
                if fast:
                    scores[count] = value
                else:
                    slow[3 * n_slow] = start
                    slow[3 * n_slow + 1] = i
                    slow[3 * n_slow + 2] = count
                    n_slow += 1
            fields += 1
            while i < size and classes[data[i]] == _BLANK:
                i += 1
            if i >= size or classes[data[i]] == _LINE_END:
                break
            if fields == 6:
                # Fields after the run tag are ignored, as trec_eval does.
                flags = 0
                while i < size:
                    kind = classes[data[i]]
                    if kind == _LINE_END:
                        break
                    flags |= kind
                    i += 1
                high |= (flags & _HIGH) != 0
                break
        if fields < 6:
            return count, n_slow, SHORT_LINE, high
        count += 1
    return count, n_slow, OK, high


@numba.njit(cache=CACHE, nogil=True)
def same_bytes(data: np.ndarray, a: int, b: int, length: int) -> bool:  # pragma: no cover - compiled
    """Whether ``data[a:a+length] == data[b:b+length]``."""
    for k in range(length):  # noqa: SIM110 - a loop compiles to a loop; all() of a generator would not
        if data[a + k] != data[b + k]:
            return False
    return True


@numba.njit(cache=CACHE, nogil=True)
def last_query_cut(data: np.ndarray, size: int, classes: np.ndarray) -> int:  # pragma: no cover - compiled
    """Where the last query's lines begin in ``data[:size]`` (whole lines): the end of the last line of another query.

    -1 when every run line is the last query's; ``size`` when there is no run line.

    Walks back line by line from the end; blank and comment lines belong to no query.
    """
    position = size
    last_start = -1
    last_length = 0
    while position > 0:
        stop = position
        while stop > 0 and classes[data[stop - 1]] == _LINE_END:
            stop -= 1
        begin = stop
        while begin > 0 and classes[data[begin - 1]] != _LINE_END:
            begin -= 1
        position = begin
        k = begin
        while k < stop and classes[data[k]] == _BLANK:
            k += 1
        if k == stop or data[k] == _HASH:
            continue
        end = k
        while end < stop and classes[data[end]] != _BLANK:
            end += 1
        if last_start < 0:
            last_start, last_length = k, end - k
        elif end - k != last_length or not same_bytes(data, k, last_start, last_length):
            return stop
    # One query's lines (the block must grow), or no run line at all (nothing to carry).
    return -1 if last_start >= 0 else size


@dataclass
class Block:
    """Whole queries' lines of one block: ``data`` holds the text, the arrays where each line's fields are."""

    data: np.ndarray
    count: int
    query_start: np.ndarray
    query_length: np.ndarray
    doc_start: np.ndarray
    doc_length: np.ndarray
    doc_hash: np.ndarray
    scores: np.ndarray


class _Lines:
    """Per-line arrays of one buffer, reused from block to block."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.query_start = np.empty(capacity, dtype=np.int64)
        self.query_length = np.empty(capacity, dtype=np.int64)
        self.doc_start = np.empty(capacity, dtype=np.int64)
        self.doc_length = np.empty(capacity, dtype=np.int64)
        self.doc_hash = np.empty(capacity, dtype=np.uint64)
        self.scores = np.empty(capacity, dtype=np.float64)
        self.slow = np.empty(3 * capacity, dtype=np.int64)


@dataclass
class RawBlock:
    """``data[:size]``: the text of whole queries, not yet scanned (:meth:`scan`)."""

    data: np.ndarray
    size: int
    lines: _Lines

    def scan(self) -> Block:
        """Split the lines; raise :class:`NotScannable` for whatever the line reader must see."""
        data, size, lines = self.data, self.size, self.lines
        if size // 12 + 1 > lines.capacity:
            lines = self.lines = _Lines(size // 12 + 1)
        count, n_slow, status, high = scan_lines(
            data,
            size,
            lines.query_start,
            lines.query_length,
            lines.doc_start,
            lines.doc_length,
            lines.doc_hash,
            lines.scores,
            lines.slow,
            _POWERS_OF_TEN,
            _CLASSES,
        )
        if status != OK:
            raise NotScannable
        if high:
            try:
                data[:size].tobytes().decode("utf-8")
            except UnicodeDecodeError:
                raise NotScannable from None
        if n_slow:
            _convert_slow(data, lines, n_slow)
        return Block(data, count, lines.query_start, lines.query_length, lines.doc_start, lines.doc_length, lines.doc_hash, lines.scores)


def _fill(stream: Any, view: memoryview) -> int:
    """Read into ``view`` until it is full or the stream ends; the number of bytes read."""
    total = 0
    while total < len(view):
        count = stream.readinto(view[total:])
        if not count:
            break
        total += count
    return total


def _open(path: Path) -> Any:
    """A binary stream of the run's text: raw for a plain file (the fastest copy), decompressed by extension otherwise."""
    import pyarrow as pa

    stream = pa.input_stream(str(path))
    if isinstance(stream, pa.CompressedInputStream):
        return stream
    stream.close()
    return open(path, "rb", buffering=0)  # closed by the caller's with


def _convert_slow(data: np.ndarray, lines: _Lines, n_slow: int) -> None:
    """Convert the scores the scanner left aside with Arrow's parser, in place; non-numbers and non-finite ones are not scannable."""
    import pyarrow as pa
    import pyarrow.compute as pc

    triples = lines.slow[: 3 * n_slow].reshape(n_slow, 3)
    starts, ends, at = triples[:, 0], triples[:, 1], triples[:, 2]
    lengths = ends - starts
    offsets = np.zeros(n_slow + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # The texts back to back: the values buffer of a string array.
    gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
    strings = pa.Array.from_buffers(pa.large_string(), n_slow, [None, pa.py_buffer(offsets), pa.py_buffer(data[gather].tobytes())])
    try:
        values = pc.cast(strings, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise NotScannable from None
    if not np.isfinite(values).all():
        raise NotScannable
    lines.scores[at] = values


def iter_raw_blocks(path: Path, *, block_bytes: int | None = None, buffers: int = 3) -> Iterator[RawBlock]:
    """Yield the run's text a block of whole queries at a time; raise :class:`NotScannable` if it cannot be read.

    The blocks rotate through ``buffers`` buffers: a block's text stays valid
    while the next ``buffers - 2`` are read (the one being filled is the third),
    so a caller may scan at most ``buffers - 1`` blocks at once. A query's lines
    that are not together are cut as two queries (the caller decides).
    """
    size_of_block = block_bytes or BLOCK_BYTES
    slots = [bytearray(size_of_block) for _ in range(buffers)]
    lines = [_Lines(size_of_block // 12 + 1) for _ in range(buffers)]
    current = 0
    carry = b""
    try:
        stream = _open(path)
    except OSError:
        raise NotScannable from None
    with stream:
        while True:
            buffer = slots[current]
            if len(buffer) < len(carry) + size_of_block // 2:
                buffer = slots[current] = bytearray(2 * len(carry) + size_of_block)
            buffer[: len(carry)] = carry
            try:
                size = len(carry) + _fill(stream, memoryview(buffer)[len(carry) :])
            except OSError:
                raise NotScannable from None
            at_end = size < len(buffer)
            data = np.frombuffer(buffer, dtype=np.uint8)
            cut = size
            if not at_end:
                line_end = buffer.rfind(b"\n", 0, size) + 1 or buffer.rfind(b"\r", 0, size) + 1
                cut = last_query_cut(data, line_end, _CLASSES) if line_end else -1
            if cut < 0:
                # One query (or one line) fills the buffer: read it again with room for more.
                carry = bytes(buffer[:size])
                slots[current] = bytearray(2 * size)
                continue
            if cut:
                yield RawBlock(data, cut, lines[current])
            if at_end:
                return
            carry = bytes(buffer[cut:size])
            current = (current + 1) % buffers
