"""The random draws behind every statistic, specified bit for bit (docs/statistics.md, "Random draws").

Library distributions (``Generator.integers``, ``choice``, ``permutation``) may
change their output between versions, so none is used. Draws come from the raw
64-bit words of the Philox4x64-10 counter-based generator (Salmon et al., SC'11;
the Random123 reference, known-answer tests included), whose bit stream numpy
guarantees stable, and are turned into indices and signs by the two rules below.

Stream ``(seed, stream)``: key = (seed, stream) as two 64-bit words; block k
(k = 0, 1, ...) is Philox4x64-10 of counter (k + 1, 0, 0, 0) under that key, and
its four output words v0..v3 are words 4k..4k+3 of the stream. This is numpy's
``Philox(key=seed + (stream << 64)).random_raw()``.

* index in [0, n) from a word w: ``floor(w * n / 2**64)`` (the high word of the
  128-bit product; bias at most n / 2**64).
* signs: bit j (least significant first) of word j // 64 of a row; bit 0 -> +1, bit 1 -> -1.
"""

from __future__ import annotations

import numpy as np

from grader.errors import UsageError

#: Stream numbers: the purpose of a draw in the high 32 bits, the leaf (task) index in the low 32.
BOOTSTRAP = 1
SIGN_FLIP = 2

_LOW32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)


def stream_id(purpose: int, leaf: int) -> int:
    """The stream number of ``purpose`` (BOOTSTRAP or SIGN_FLIP) for leaf number ``leaf``."""
    if not 0 <= leaf < 2**32:
        raise UsageError(f"leaf index {leaf} out of range")
    return (purpose << 32) | leaf


class WordStream:
    """The raw 64-bit words of one Philox4x64-10 stream, read in order."""

    def __init__(self, seed: int, stream: int) -> None:
        if not 0 <= seed < 2**64:
            raise UsageError(f"seed {seed} is not in [0, 2**64)")
        if not 0 <= stream < 2**64:
            raise UsageError(f"stream {stream} is not in [0, 2**64)")
        self._generator = np.random.Philox(key=seed + (stream << 64))

    def words(self, count: int) -> np.ndarray:
        """The next ``count`` words (uint64)."""
        return np.asarray(self._generator.random_raw(count), dtype=np.uint64)


def indices_from_words(words: np.ndarray, n: int) -> np.ndarray:
    """``floor(w * n / 2**64)`` for each word ``w`` (int64), exactly, without 128-bit integers.

    With w = hi * 2**32 + lo: floor(w n / 2**64) = floor((hi n + floor(lo n / 2**32)) / 2**32),
    and for n < 2**32 every intermediate fits in 64 bits. Computed in place: large
    temporaries cost more than the arithmetic.
    """
    if not 1 <= n < 2**32:
        raise UsageError(f"cannot draw indices in [0, {n})")
    size = np.uint64(n)
    low = np.bitwise_and(words, _LOW32)
    low *= size
    low >>= _SHIFT32
    out = np.right_shift(words, _SHIFT32)
    out *= size
    out += low
    out >>= _SHIFT32
    return out.view(np.int64)


def words_per_sign_row(n: int) -> int:
    """Words one row of ``n`` signs consumes (whole words per row, so rows never share a word)."""
    return (n + 63) // 64


def sign_bits_from_words(words: np.ndarray, rows: int, n: int) -> np.ndarray:
    """A (rows, n) uint8 array of sign bits: bit j of word j // 64 of each row, least significant bit first."""
    per_row = words_per_sign_row(n)
    if words.shape != (rows * per_row,):
        raise UsageError("wrong number of words for the signs asked")
    as_bytes = words.astype("<u8").view(np.uint8).reshape(rows, per_row * 8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :n]


def signs_from_words(words: np.ndarray, rows: int, n: int) -> np.ndarray:
    """A (rows, n) float64 array of signs: bit 0 -> +1, bit 1 -> -1 (see :func:`sign_bits_from_words`)."""
    return 1.0 - 2.0 * sign_bits_from_words(words, rows, n).astype(np.float64)
