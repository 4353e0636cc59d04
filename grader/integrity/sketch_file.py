"""The training-sketch file (``grader sketch-training --out FILE``): a compact binary format and its strict reader.

Layout, every integer big-endian (docs/contamination.md, "The sketch file", says the same)::

    offset  size  field
         0     8  magic  b"GRSKETCH"
         8     2  format version (2)
        10     2  normalisation version
        12     2  num_perm
        14     1  code_shingle
        15     1  text_shingle
        16     2  window_tokens
        18     2  window_stride
        20     2  min_code_tokens
        22     2  min_text_tokens
        24     8  seed
        32     2  fine_window_tokens
        34     2  fine_window_stride
        36     2  statement_max_tokens
        38     2  statement_min
        40     8  count: signatures that follow
        48  count * num_perm * 2   signatures, uint16 each, rows distinct and in ascending lexicographic order
                                  (windows and statement sets alike: their features never meet)
       end    32  SHA-256 of every byte before it

Version 2 (normalisation version 2) added fine windows of long code and statement-set rows for short code, and
their four parameters at offsets 32-39. A version-1 file (the same layout without offsets 32-39: ``count`` at
32, signatures from 40) is still read, as :data:`VERSION_1` parameters, and compared as the grader that made it
compared it (windows only: code under 40 tokens is not audited), so its figures, and a hosted grade re-scored
with it, stay what they were; this grader writes version 2 only, and re-encodes a version-1 sketch as version 1
(the same bytes, so the same digest).
Rows are sorted and distinct so that the same texts always give the same bytes (and repeats add nothing). The
reader reads no more than its cap, then refuses anything but exactly this: another magic or version,
parameters other than the ones this grader compares with (:class:`SketchParameters` defaults, the same
without fine windows: :data:`WITHOUT_FINE_WINDOWS`, or a version-1 file's: :data:`VERSION_1`), a length that
does not match ``count``, rows out of order or repeated, or a wrong digest.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from grader.errors import InputError, UsageError
from grader.files import atomic_write_bytes, read_bounded
from grader.integrity.sketch_text import SketchParameters

MAGIC = b"GRSKETCH"
FORMAT_VERSION = 2
#: Default cap of a sketch file, in bytes (about 524,000 windows at 128 permutations). On a hosted competition
#: the sketch's bytes count against the upload cap (``upload.max_bytes``) together with the submission's.
DEFAULT_MAX_BYTES = 128 << 20
#: Where a submission carries its training sketch, beside submission.json (docs/hosting.md, "Contamination audit").
SUBMISSION_SKETCH = "training.sketch"
_HEADER = struct.Struct(">8sHHHBBHHHHQHHHHQ")
_HEADER_V1 = struct.Struct(">8sHHHBBHHHHQQ")
_PREFIX = struct.Struct(">8sH")
#: The parameters of a sketch of format version 1 (normalisation 1): windows only, no fine windows, no
#: statement sets (0 turns each off).
VERSION_1 = SketchParameters(normalisation=1, fine_window_tokens=0, fine_window_stride=0, statement_max_tokens=0, statement_min=0)
#: The parameters of a sketch made with ``grader sketch-training --no-fine-windows``, the one other set read.
WITHOUT_FINE_WINDOWS = SketchParameters(fine_window_tokens=0, fine_window_stride=0)
_DIGEST_BYTES = 32


class SketchFileError(InputError):
    """A training-sketch file is unreadable, too large or not in the format (exit 2: an input error)."""


@dataclass(frozen=True)
class TrainingSketch:
    """A sketch: its parameters and its signature rows (uint16, shape ``(count, num_perm)``, sorted, distinct)."""

    parameters: SketchParameters
    rows: np.ndarray

    @property
    def count(self) -> int:
        """Signature rows (distinct windows) in the sketch."""
        return int(self.rows.shape[0])


def encoded_size(count: int, num_perm: int, *, version: int = FORMAT_VERSION) -> int:
    """Bytes of a sketch file of ``count`` rows."""
    return (_HEADER_V1 if version == 1 else _HEADER).size + count * num_perm * 2 + _DIGEST_BYTES


def distinct_sorted(rows: np.ndarray) -> np.ndarray:
    """``rows`` made distinct and sorted lexicographically (the file's order)."""
    if len(rows) == 0:
        return rows.reshape(0, rows.shape[1]).astype(np.uint16)
    return np.unique(rows.astype(np.uint16), axis=0)


def encode(sketch: TrainingSketch) -> bytes:
    """The file's bytes (``sketch.rows`` must already be distinct and sorted: :func:`distinct_sorted`)."""
    p = sketch.parameters
    # the fields both versions' headers hold, in their order
    shared: tuple[int, ...] = (p.normalisation, p.num_perm, p.code_shingle, p.text_shingle, p.window_tokens, p.window_stride)
    shared += (p.min_code_tokens, p.min_text_tokens, p.seed)
    if p.normalisation == VERSION_1.normalisation:  # read from a version-1 file: its own bytes again
        header = _HEADER_V1.pack(MAGIC, 1, *shared, sketch.count)
    else:
        fine = (p.fine_window_tokens, p.fine_window_stride, p.statement_max_tokens, p.statement_min)
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, *shared, *fine, sketch.count)
    body = header + sketch.rows.astype(">u2").tobytes()
    return body + hashlib.sha256(body).digest()


def write_sketch(path: str | PathLike[str], sketch: TrainingSketch, *, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Write ``sketch`` atomically; refuse (before writing) one over ``max_bytes``. Returns its size in bytes."""
    size = encoded_size(sketch.count, sketch.parameters.num_perm)
    if size > max_bytes:
        raise UsageError(
            f"{path}: the sketch would be {size} bytes ({sketch.count} windows), over the {max_bytes}-byte cap",
            hint="sketch fewer texts, leave out the fine windows of long code (--no-fine-windows), or raise --max-bytes up to the competition's upload cap",
        )
    atomic_write_bytes(path, encode(sketch))
    return size


def _refuse(path: Path, field: str, what: str) -> SketchFileError:
    return SketchFileError(what, path=path, field=field)


def decode(data: bytes, *, path: Path) -> TrainingSketch:
    """Parse a sketch file's bytes strictly (see the module's doc)."""
    # Magic and version first: the version says how long the header is.
    if len(data) < _PREFIX.size:
        raise _refuse(path, "header", f"{len(data)} bytes, too short for a training sketch")
    magic, version = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise _refuse(path, "magic", "not a training sketch (made by `grader sketch-training`)")
    if version not in (1, FORMAT_VERSION):
        raise _refuse(path, "format_version", f"format version {version}; this grader reads versions 1 and {FORMAT_VERSION}")
    header = _HEADER_V1 if version == 1 else _HEADER
    if len(data) < header.size + _DIGEST_BYTES:
        raise _refuse(path, "header", f"{len(data)} bytes, too short for a training sketch")
    fields = header.unpack_from(data)
    normalisation, num_perm, code_shingle, text_shingle, window_tokens, window_stride, min_code, min_text, seed = fields[2:11]
    fine_tokens, fine_stride, statement_max, statement_min, count = (0, 0, 0, 0, fields[11]) if version == 1 else fields[11:]
    found = SketchParameters(
        num_perm,
        code_shingle,
        text_shingle,
        seed,
        normalisation,
        window_tokens,
        window_stride,
        min_code,
        min_text,
        fine_tokens,
        fine_stride,
        statement_max,
        statement_min,
    )
    # Fine windows are the training side's alone (a test item is never cut finer): a sketch made without them
    # (``--no-fine-windows``: both fields 0) is compared the same way, it only holds fewer rows.
    without_fine = (fine_tokens, fine_stride) == (0, 0)
    expected = VERSION_1 if version == 1 else WITHOUT_FINE_WINDOWS if without_fine else SketchParameters()
    for name in expected.__dataclass_fields__:
        if getattr(found, name) != getattr(expected, name):
            also = " (or 0, without fine windows)" if name.startswith("fine_window") and version != 1 else ""
            raise _refuse(path, name, f"{getattr(found, name)}; this grader compares sketches made with {getattr(expected, name)}{also}")
    size = encoded_size(count, num_perm, version=version)
    if len(data) != size:
        raise _refuse(path, "count", f"says {count} signatures, but the file holds {len(data)} bytes, not {size}")
    body, digest = data[:-_DIGEST_BYTES], data[-_DIGEST_BYTES:]
    if hashlib.sha256(body).digest() != digest:
        raise _refuse(path, "sha256", "the digest does not match the file's contents (truncated or altered)")
    rows = np.frombuffer(body, dtype=">u2", offset=header.size).astype(np.uint16).reshape(count, num_perm)
    if count > 1:
        differ = rows[1:] != rows[:-1]
        first = np.argmax(differ, axis=1)  # first differing component of each consecutive pair
        has = differ.any(axis=1)
        ascending = rows[1:][np.arange(count - 1), first] > rows[:-1][np.arange(count - 1), first]
        bad = np.flatnonzero(~(has & ascending))
        if len(bad):
            raise _refuse(path, "signatures", f"row {int(bad[0]) + 1} is not after row {int(bad[0])} (rows must be distinct and sorted)")
    return TrainingSketch(found, rows)


def read_sketch(path: str | PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> TrainingSketch:
    """Read and check a sketch file, never more than ``max_bytes`` (+1) bytes of it."""
    where = Path(path)
    data = read_bounded(where, max_bytes, lambda reason: SketchFileError(reason, path=where), what="training sketch", follow_links=False)
    return decode(data, path=where)
