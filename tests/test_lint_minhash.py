"""The MinHash and LSH arithmetic against values derived here: Jaccard estimates, the banding curve, shingles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.integrity.minhash import Permutations, candidate_pairs, candidate_probability, lsh_parameters, shingle_hashes, signatures
from grader.integrity.normalise import TokenCoder, is_code_like, normalised_text, tokens


@pytest.mark.parametrize("jaccard", [0.2, 0.5, 0.8, 0.95])
def test_signature_agreement_estimates_jaccard(jaccard):
    # Two sets of 4,000 distinct random 64-bit values sharing exactly round(J * 8000 / (1 + J)) of them.
    rng = np.random.default_rng(1)
    size = 4000
    shared = round(jaccard * 2 * size / (1 + jaccard))
    pool = np.unique(rng.integers(0, 2**63, size=3 * size, dtype=np.uint64))[: 2 * size - shared]
    a, b = pool[:size], np.concatenate((pool[:shared], pool[size:]))
    exact = shared / (2 * size - shared)
    assert len(np.intersect1d(a, b)) == shared
    permutations = Permutations.make(2048)
    rows = signatures(np.concatenate((a, b)), np.array([0, size, 2 * size]), permutations)
    estimate = float(np.mean(rows[0] == rows[1]))
    sigma = math.sqrt(exact * (1 - exact) / len(permutations))
    assert abs(estimate - exact) < 4 * sigma + 1e-9


def test_banding_curve_is_the_published_formula():
    # Leskovec, Rajaraman, Ullman, Mining of Massive Datasets, 3.4.2: 1 - (1 - s^r)^b; 20 bands x 5 rows at s = 0.8 is 0.99964.
    assert candidate_probability(0.8, 20, 5) == pytest.approx(0.99964, abs=5e-6)
    assert candidate_probability(0.3, 20, 5) == pytest.approx(0.047, abs=5e-4)
    bands, rows = lsh_parameters(0.8)
    assert bands * rows <= 128
    assert 1 - (1 - 0.8**rows) ** bands >= 0.99
    assert (bands, rows) == (16, 6)


def test_identical_signatures_are_candidates_and_different_ones_not():
    rng = np.random.default_rng(2)
    rows = rng.integers(0, 2**32, size=(5, 96), dtype=np.uint64).astype(np.uint32)
    rows[3] = rows[1]
    rows[4, :6] = rows[0, :6]  # one band in common
    assert candidate_pairs(rows, 16, 6).tolist() == [[0, 4], [1, 3]]


def test_shingles_of_short_and_long_texts():
    hashes, offsets = shingle_hashes([[1, 2], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5]], size=5)
    assert offsets.tolist() == [0, 1, 3, 4]  # a short text has one shingle; six tokens have two windows of five
    assert hashes[2] != hashes[1] and hashes[3] == hashes[1]  # [1..5] is the first window of the second text
    assert len(set(hashes.tolist())) == 3


def test_renamed_identifiers_share_the_code_view_and_prose_keeps_its_words():
    coder = TokenCoder()
    first = tokens(normalised_text("def area(width, height):\n    return width * height"))
    second = tokens(normalised_text("def surface(w, h):\n        return w * h"))
    assert is_code_like(first) and is_code_like(second)
    assert coder.encode(first, True) == coder.encode(second, True)
    prose_a, prose_b = tokens("Return the area of the rectangle"), tokens("Return the colour of the rectangle")
    assert not is_code_like(prose_a)
    assert coder.encode(prose_a, False) != coder.encode(prose_b, False)
    assert coder.encode(tokens("RETURN The Area"), False) == coder.encode(tokens("return the area"), False)


def test_prefilter_drops_a_pair_at_the_threshold_with_probability_at_most_one_in_a_million():
    from grader.integrity.duplicates import least_agreement

    def below(k, n=96, p=0.8):  # P(Binomial(n, p) < k), summed exactly with integers
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k))

    k = least_agreement(0.8, 96)
    assert below(k) <= 1e-6 < below(k + 1)
