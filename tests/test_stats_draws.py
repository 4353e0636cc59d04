"""The random draws follow their written specification (docs/statistics.md), checked against an independent pure-Python Philox."""

from __future__ import annotations

import numpy as np
import pytest

from grader.errors import UsageError
from grader.stats.draws import BOOTSTRAP, SIGN_FLIP, WordStream, indices_from_words, signs_from_words, stream_id, words_per_sign_row

MASK = (1 << 64) - 1


def philox4x64_10(counter: list[int], key: list[int]) -> list[int]:
    """Philox4x64-10 as published (Salmon et al. 2011 / Random123), written from the paper's constants."""
    c, k = list(counter), list(key)
    for round_ in range(10):
        if round_:
            k = [(k[0] + 0x9E3779B97F4A7C15) & MASK, (k[1] + 0xBB67AE8584CAA73B) & MASK]
        p0 = 0xD2E7470EE14C6C93 * c[0]
        p1 = 0xCA5A826395121157 * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 64) ^ c[3] ^ k[1], p0 & MASK]
    return c


def reference_words(seed: int, stream: int, count: int) -> list[int]:
    words: list[int] = []
    block = 0
    while len(words) < count:
        words += philox4x64_10([block + 1, 0, 0, 0], [seed, stream])
        block += 1
    return words[:count]


def test_reference_philox_matches_random123_known_answers() -> None:
    # Known-answer vectors of Random123's kat_vectors for philox4x64_10.
    assert philox4x64_10([0, 0, 0, 0], [0, 0]) == [0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B]
    assert philox4x64_10([MASK] * 4, [MASK, MASK]) == [0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0]


@pytest.mark.parametrize(
    ("seed", "stream"), [(0, stream_id(BOOTSTRAP, 0)), (12345, stream_id(SIGN_FLIP, 7)), (2**64 - 1, stream_id(BOOTSTRAP, 2**32 - 1))]
)
def test_word_stream_is_the_specified_philox_stream(seed: int, stream: int) -> None:
    generator = WordStream(seed, stream)
    drawn = list(generator.words(5)) + list(generator.words(6))  # read in pieces: one continuous stream
    assert [int(w) for w in drawn] == reference_words(seed, stream, 11)


def test_indices_are_the_high_word_of_the_product() -> None:
    words = np.array(reference_words(3, 5, 2000) + [0, MASK, 1 << 63, (1 << 32) - 1, 1 << 32], dtype=np.uint64)
    for n in (1, 2, 7, 881, 50_000, 2**31 + 11, 2**32 - 1):
        expected = [(int(w) * n) >> 64 for w in words]
        got = indices_from_words(words.copy(), n)
        assert got.dtype == np.int64 and got.tolist() == expected
    with pytest.raises(UsageError):
        indices_from_words(words, 0)


def test_signs_take_bits_least_significant_first_whole_words_per_row() -> None:
    n, rows = 70, 3
    words = reference_words(9, 1, rows * words_per_sign_row(n))
    signs = signs_from_words(np.array(words, dtype=np.uint64), rows, n)
    for row in range(rows):
        for j in range(n):
            bit = (words[row * 2 + j // 64] >> (j % 64)) & 1
            assert signs[row, j] == (-1.0 if bit else 1.0)
    assert words_per_sign_row(64) == 1 and words_per_sign_row(65) == 2
