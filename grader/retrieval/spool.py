"""Embeddings on disk while a shard is encoded, read back in verified blocks for the search.

A shard's document vectors are appended to a float32 file as the encoder
produces them, so memory holds one encoding chunk, not the shard. The file is
cut into blocks of ``block_rows`` rows; the SHA-256 of each block is recorded as
it is written. The search reads one block at a time into one reused buffer,
checks its digest (a block that differs is the platform's fault, ``INFRA``, never
searched), and only then searches it. The file is created exclusively, mode
0600, in a folder of the caller's, and deleted when the spool is closed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.errors import TaskFailure, UsageError
from grader.failures import FailureCode

_ROW_DTYPE = np.dtype("<f4")


@dataclass(frozen=True)
class Spool:
    """A finished spool file: ``rows`` x ``dimension`` float32, with one SHA-256 per block of ``block_rows``."""

    path: Path
    rows: int
    dimension: int
    block_rows: int
    block_digests: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        return self.rows * self.dimension * _ROW_DTYPE.itemsize

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, block)`` for each block, verified; the array is a view of one reused buffer (copy to keep it)."""
        row_bytes = self.dimension * _ROW_DTYPE.itemsize
        buffer = bytearray(min(self.block_rows, max(self.rows, 1)) * row_bytes)
        view = memoryview(buffer)
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            for number, first in enumerate(range(0, self.rows, self.block_rows)):
                rows = min(self.block_rows, self.rows - first)
                wanted = rows * row_bytes
                got = 0
                while got < wanted:
                    read = os.preadv(fd, [view[got:wanted]], first * row_bytes + got)
                    if read == 0:
                        break
                    got += read
                if got != wanted or hashlib.sha256(view[:wanted]).hexdigest() != self.block_digests[number]:
                    raise TaskFailure(FailureCode.INFRA, f"embedding spool {self.path.name}: block {number} changed on disk since it was written")
                yield first, np.frombuffer(buffer, dtype=_ROW_DTYPE, count=rows * self.dimension).reshape(rows, self.dimension)
        finally:
            os.close(fd)

    def delete(self) -> None:
        """Remove the file (done when the shard is done, searched or failed)."""
        self.path.unlink(missing_ok=True)


class SpoolWriter:
    """Appends float32 rows to a new file, recording a digest per block of ``block_rows``."""

    def __init__(self, path: Path, dimension: int, block_rows: int) -> None:
        if dimension < 1 or block_rows < 1:
            raise UsageError(f"dimension ({dimension}) and block rows ({block_rows}) must be positive")
        self.path = path
        self.dimension = dimension
        self.block_rows = block_rows
        self.rows = 0
        self._digests: list[str] = []
        self._hash = hashlib.sha256()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)

    def append(self, vectors: np.ndarray) -> None:
        """Write ``vectors`` (rows, dimension) after the rows written so far."""
        array = np.ascontiguousarray(vectors, dtype=_ROW_DTYPE)
        if array.ndim != 2 or array.shape[1] != self.dimension:
            raise UsageError(f"rows of shape {array.shape} do not fit a spool of dimension {self.dimension}")
        at = 0
        while at < len(array):
            room = self.block_rows - self.rows % self.block_rows
            piece = array[at : at + room]
            data = piece.reshape(-1).view(np.uint8).data  # the rows' bytes, no copy
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
            self._hash.update(data)
            self.rows += len(piece)
            at += len(piece)
            if self.rows % self.block_rows == 0:
                self._digests.append(self._hash.hexdigest())
                self._hash = hashlib.sha256()

    def finish(self) -> Spool:
        """Close the file and describe it."""
        if self.rows % self.block_rows:
            self._digests.append(self._hash.hexdigest())
        os.close(self._fd)
        return Spool(self.path, self.rows, self.dimension, self.block_rows, tuple(self._digests))

    def abandon(self) -> None:
        """Close and delete a spool that will not be finished (the encoder failed)."""
        try:
            os.close(self._fd)
        except OSError:
            pass
        self.path.unlink(missing_ok=True)
