"""Shingles, MinHash signatures and LSH banding, vectorised with numpy over batches of documents.

* **Shingles**: every run of :data:`CODE_SHINGLE_SIZE` (code view) or :data:`TEXT_SHINGLE_SIZE` (text view) consecutive token integers of a text
  (:mod:`grader.integrity.normalise`), hashed to 64 bits (polynomial over the tokens, then murmur3's
  64-bit finaliser); a text of fewer tokens has one shingle, all of its tokens. A text's shingle set is
  the set of these hashes.
* **MinHash**: permutation ``p`` maps a shingle hash ``x`` to ``((a_p * fold(x) + b_p) mod 2**64) >> 32``,
  with ``fold(x) = (x xor (x >> 32)) mod 2**32`` and ``a_p``, ``b_p`` drawn from a fixed seed
  (Dietzfelbinger's multiply-add-shift: 2-independent on 32-bit keys). Component ``p`` of the signature is
  the least value over the set; two sets agree on a component with probability their Jaccard similarity.
* **LSH**: the signature is cut into ``b`` bands of ``r`` rows; two texts become a candidate pair when
  they agree on all rows of at least one band, with probability ``1 - (1 - s**r)**b`` at similarity ``s``.
  :func:`lsh_parameters` picks ``b`` and ``r``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from grader.errors import InternalError, UsageError

#: Tokens per shingle of a code-like text (code view: identifiers are one placeholder, so longer runs are needed
#: before two unrelated functions of common shapes stop sharing most shingles).
CODE_SHINGLE_SIZE = 10
#: Tokens per shingle of any other text (text view).
TEXT_SHINGLE_SIZE = 5
#: Most MinHash permutations (``b * r`` never exceeds it).
MAX_PERMUTATIONS = 128
#: Least probability that a pair at exactly the threshold becomes a candidate (:func:`lsh_parameters`).
MIN_RECALL_AT_THRESHOLD = 0.99
#: Seed of the permutations' coefficients: fixed, so that a lint repeats exactly.
SEED = 20240607
#: Members of one LSH bucket paired with every other member; a larger bucket pairs each later member with these only.
BUCKET_PAIR_LIMIT = 64

_MIX = np.uint64(0x9E3779B97F4A7C15)
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_LOW32 = np.uint64(0xFFFFFFFF)


def _fmix64(values: np.ndarray) -> np.ndarray:
    values ^= values >> np.uint64(33)
    values *= _FMIX1
    values ^= values >> np.uint64(33)
    values *= _FMIX2
    values ^= values >> np.uint64(33)
    return values


def shingle_hashes(token_codes: Sequence[Sequence[int]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """The shingle hashes of each text (uint64, concatenated) and each text's start in them (``len + 1`` offsets).

    Every text must have at least one token. Duplicates within a text are kept (they change no minimum).
    """
    counts = np.fromiter((len(codes) for codes in token_codes), dtype=np.int64, count=len(token_codes))
    if len(counts) and counts.min() < 1:
        raise InternalError("a text without tokens has no shingles")
    pad = size - 1
    flat = np.zeros(int(counts.sum()) + pad * len(counts), dtype=np.uint64)
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts + pad, out=starts[1:])
    # Tokens are laid out text after text, each followed by ``pad`` zeros, so a window never crosses into the next text.
    token_positions = np.repeat(starts[:-1] - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(int(counts.sum()))
    flat[token_positions] = np.fromiter((code for codes in token_codes for code in codes), dtype=np.uint64, count=int(counts.sum()))
    windows = len(flat) - pad
    combined = flat[:windows].copy()
    for offset in range(1, size):
        combined *= _MIX
        combined += flat[offset : offset + windows]
    combined = _fmix64(combined)
    per_text = np.maximum(counts - pad, 1)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(per_text, out=offsets[1:])
    positions = np.repeat(starts[:-1] - offsets[:-1], per_text) + np.arange(int(offsets[-1]))
    return combined[positions], offsets


@dataclass(frozen=True)
class Permutations:
    """The ``a`` (odd) and ``b`` coefficients of each MinHash permutation."""

    a: np.ndarray
    b: np.ndarray

    @classmethod
    def make(cls, count: int, seed: int = SEED) -> Permutations:
        rng = np.random.default_rng(seed)
        a = rng.integers(0, 1 << 63, size=count, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        b = rng.integers(0, 1 << 63, size=count, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size=count, dtype=np.uint64)
        return cls(a, b)

    def __len__(self) -> int:
        return len(self.a)


def signatures(hashes: np.ndarray, offsets: np.ndarray, permutations: Permutations) -> np.ndarray:
    """The MinHash signature (uint32, one row per text) of each text's shingle set.

    One permutation at a time over a contiguous array, in place (measured 9x faster than a 2-D block of
    permutations reduced along an axis).
    """
    keys = (hashes ^ (hashes >> np.uint64(32))) & _LOW32
    values = np.empty_like(keys)
    out = np.empty((len(offsets) - 1, len(permutations)), dtype=np.uint32)
    starts = offsets[:-1]
    shift = np.uint64(32)
    for column in range(len(permutations)):
        np.multiply(keys, permutations.a[column], out=values)
        values += permutations.b[column]
        values >>= shift
        out[:, column] = np.minimum.reduceat(values, starts)
    return out


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that two texts of Jaccard ``similarity`` share a band: ``1 - (1 - s**r)**b``."""
    return float(1.0 - (1.0 - similarity**rows) ** bands)


def lsh_parameters(threshold: float, max_permutations: int = MAX_PERMUTATIONS, min_recall: float = MIN_RECALL_AT_THRESHOLD) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= max_permutations``, candidate probability at ``threshold`` at
    least ``min_recall``, and the least false-candidate area ``integral_0^threshold P(s) ds`` (midpoint rule, 1000 steps).
    """
    if not 0.0 < threshold <= 1.0:
        raise UsageError(f"the near-duplicate threshold must be in (0, 1], got {threshold}")
    grid = (np.arange(1000) + 0.5) / 1000 * threshold
    best: tuple[float, int, int] | None = None
    for rows in range(1, max_permutations + 1):
        for bands in range(1, max_permutations // rows + 1):
            if candidate_probability(threshold, bands, rows) < min_recall:
                continue
            area = float(np.mean(1.0 - (1.0 - grid**rows) ** bands)) * threshold
            if best is None or area < best[0] - 1e-15:
                best = (area, bands, rows)
    if best is None:  # only for a threshold so low that every setting is recall-bound: one row per band
        return max_permutations, 1
    return best[1], best[2]


def band_keys(signature_rows: np.ndarray, bands: int, rows: int) -> Iterator[np.ndarray]:
    """For each band, one uint64 key per text (equal signatures in the band give equal keys)."""
    for band in range(bands):
        part = signature_rows[:, band * rows : (band + 1) * rows].astype(np.uint64)
        key = np.full(len(signature_rows), np.uint64(band + 1), dtype=np.uint64)
        for column in range(rows):
            key *= _MIX
            key += part[:, column]
            key = _fmix64(key)
        yield key


def candidate_pairs(signature_rows: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Distinct pairs ``(i, j)``, ``i < j``, of texts sharing at least one band (int64, shape ``(n, 2)``).

    In a bucket of more than :data:`BUCKET_PAIR_LIMIT` texts, each text is paired with the bucket's first
    :data:`BUCKET_PAIR_LIMIT` texts only (in text order), bounding the work on a mass of near-copies.
    """
    found: list[np.ndarray] = []
    for key in band_keys(signature_rows, bands, rows):
        order = np.argsort(key, kind="stable")
        sorted_keys = key[order]
        boundaries = np.flatnonzero(np.diff(sorted_keys)) + 1
        group_starts = np.concatenate(([0], boundaries))
        group_ends = np.concatenate((boundaries, [len(sorted_keys)]))
        sizes = group_ends - group_starts
        twos = group_starts[sizes == 2]  # the common case, all at once
        found.append(np.stack((order[twos], order[twos + 1]), axis=1))
        for start, end in zip(group_starts[sizes > 2], group_ends[sizes > 2]):
            members = order[start:end]  # ascending text order (stable sort)
            for position in range(min(len(members) - 1, BUCKET_PAIR_LIMIT)):
                later = members[position + 1 :]
                found.append(np.stack((np.full(len(later), members[position]), later), axis=1))
    count = np.int64(len(signature_rows))
    codes = np.unique(np.concatenate([pair[:, 0].astype(np.int64) * count + pair[:, 1] for pair in found])) if found else np.empty(0, np.int64)
    return np.stack((codes // count, codes % count), axis=1)
