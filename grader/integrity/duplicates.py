"""Exact and near duplicates among a stream of texts, in two passes and bounded memory.

Pass 1 (:meth:`DuplicateFinder.add`, one text at a time) keeps, per text, a 16-byte digest of its normalised
text and, for the first text of each distinct normalised text, a MinHash signature (4 bytes per permutation).
:meth:`DuplicateFinder.finish` bands the signatures into candidate pairs, then re-reads the texts (pass 2) and
computes the shingle sets of the candidates only, keeping a pair when its exact Jaccard similarity is at least
the threshold. Texts whose normalised text is empty take no part. Clusters are the connected components of
"equal normalised text" and "verified near pair".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.stats import binom

from grader.integrity.minhash import (
    CODE_SHINGLE_SIZE,
    MAX_PERMUTATIONS,
    TEXT_SHINGLE_SIZE,
    Permutations,
    candidate_pairs,
    lsh_parameters,
    shingle_hashes,
    signatures,
)
from grader.integrity.normalise import TokenCoder, is_code_like, normalised_text, tokens

#: Texts whose signatures are computed together.
BATCH = 4096
#: Default Jaccard threshold of a near duplicate.
DEFAULT_THRESHOLD = 0.8


@dataclass(frozen=True)
class Duplicates:
    """What :class:`DuplicateFinder` found among ``count`` texts (indices in stream order)."""

    count: int
    #: per text: the index of the first text with the same normalised text (itself if first; -1 if empty)
    first_equal: np.ndarray
    #: verified near pairs ``(i, j)``, ``i < j``, both first of their normalised text, and their Jaccard similarity
    near_pairs: np.ndarray
    near_similarity: np.ndarray
    #: per text: its cluster's label (the least index in it), or -1 when it is in no cluster of two or more
    cluster: np.ndarray
    #: LSH candidate pairs, and those of them whose signatures agree enough to be checked in pass 2
    candidates: int
    checked: int

    def exact_groups(self) -> list[np.ndarray]:
        """Groups (two or more texts) of equal normalised text, each ascending, ordered by first member."""
        return _groups(np.where(self.first_equal >= 0, self.first_equal, -1))

    def clusters(self) -> list[np.ndarray]:
        """Clusters of two or more texts (exact or near), each ascending, ordered by first member."""
        return _groups(self.cluster)


def _groups(labels: np.ndarray) -> list[np.ndarray]:
    valid = np.flatnonzero(labels >= 0)
    order = valid[np.argsort(labels[valid], kind="stable")]
    sorted_labels = labels[order]
    cuts = np.flatnonzero(np.diff(sorted_labels)) + 1
    return [group for group in np.split(order, cuts) if len(group) > 1]


#: A candidate pair whose signatures agree on fewer components than a pair at exactly the threshold does with this
#: probability (binomial lower tail) is dropped before its exact check.
PREFILTER_MISS = 1e-6


def least_agreement(threshold: float, permutations: int) -> int:
    """The least number of agreeing signature components a checked pair needs: the largest ``k`` with
    ``P(Binomial(permutations, threshold) < k) <= PREFILTER_MISS``, so a pair at the threshold or above is dropped
    with probability at most :data:`PREFILTER_MISS`."""
    tail = binom.cdf(np.arange(permutations + 1) - 1, permutations, threshold)  # tail[k] = P(X < k)
    return int(np.flatnonzero(tail <= PREFILTER_MISS)[-1])


def agreements(rows: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """For each pair of rows, on how many signature components the two agree."""
    out = np.empty(len(pairs), dtype=np.int64)
    for start in range(0, len(pairs), chunk):
        part = pairs[start : start + chunk]
        out[start : start + chunk] = np.count_nonzero(rows[part[:, 0]] == rows[part[:, 1]], axis=1)
    return out


class DuplicateFinder:
    """Feed texts with :meth:`add`, then call :meth:`finish` with the same texts again, in the same order."""

    def __init__(
        self,
        threshold: float = DEFAULT_THRESHOLD,
        *,
        code_shingle_size: int = CODE_SHINGLE_SIZE,
        text_shingle_size: int = TEXT_SHINGLE_SIZE,
        max_permutations: int = MAX_PERMUTATIONS,
    ) -> None:
        self.threshold = threshold
        self.shingle_size = {True: code_shingle_size, False: text_shingle_size}
        self.bands, self.rows = lsh_parameters(threshold, max_permutations)
        self.permutations = Permutations.make(self.bands * self.rows)
        self._coder = TokenCoder()
        self._digests: dict[bytes, int] = {}
        self._first_equal: list[int] = []
        self._pending: dict[bool, list[list[int]]] = {True: [], False: []}
        self._pending_index: dict[bool, list[int]] = {True: [], False: []}
        self._signatures: list[np.ndarray] = []
        self._signed: list[np.ndarray] = []

    def _codes(self, normalised: str) -> tuple[list[int], bool]:
        token_list = tokens(normalised)
        code_like = is_code_like(token_list)
        return self._coder.encode(token_list, code_like), code_like

    def add(self, text: str) -> str:
        """Take the next text; returns its normalised text."""
        normalised = normalised_text(text)
        index = len(self._first_equal)
        if not normalised:
            self._first_equal.append(-1)
            return normalised
        digest = hashlib.blake2b(normalised.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        first = self._digests.setdefault(digest, index)
        self._first_equal.append(first)
        if first == index:
            codes, view = self._codes(normalised)
            if codes:  # a text of spaces only is empty; one of only, e.g., control characters has no tokens
                self._pending[view].append(codes)
                self._pending_index[view].append(index)
                if len(self._pending[view]) >= BATCH:
                    self._flush(view)
        return normalised

    def _flush(self, view: bool) -> None:
        if self._pending[view]:
            hashes, offsets = shingle_hashes(self._pending[view], self.shingle_size[view])
            self._signatures.append(signatures(hashes, offsets, self.permutations))
            self._signed.append(np.asarray(self._pending_index[view], dtype=np.int64))
            self._pending[view], self._pending_index[view] = [], []

    def finish(self, texts_again: Iterable[str]) -> Duplicates:
        """Verify the candidate pairs on ``texts_again`` (the texts of pass 1, in order) and return what was found."""
        self._flush(True)
        self._flush(False)
        self._digests.clear()
        count = len(self._first_equal)
        first_equal = np.asarray(self._first_equal, dtype=np.int64)
        signed = np.concatenate(self._signed) if self._signed else np.empty(0, np.int64)
        rows = np.concatenate(self._signatures) if self._signatures else np.empty((0, len(self.permutations)), np.uint32)
        self._signatures = []
        row_pairs = candidate_pairs(rows, self.bands, self.rows) if len(rows) > 1 else np.empty((0, 2), np.int64)
        candidates = len(row_pairs)
        row_pairs = row_pairs[agreements(rows, row_pairs) >= least_agreement(self.threshold, len(self.permutations))]
        pairs = signed[row_pairs]
        del rows, row_pairs
        near_pairs, similarity = self._verify(pairs, texts_again, count)
        edges_from = np.concatenate((np.flatnonzero(first_equal >= 0), near_pairs[:, 0]))
        edges_to = np.concatenate((first_equal[first_equal >= 0], near_pairs[:, 1]))
        graph = coo_matrix((np.ones(len(edges_from), dtype=np.int8), (edges_from, edges_to)), shape=(count, count))
        _, labels = connected_components(graph, directed=False)
        sizes = np.bincount(labels, minlength=count) if count else np.zeros(0, np.int64)
        # Label each cluster by its least member, so labels do not depend on scipy's numbering.
        least = np.full(len(sizes), count, dtype=np.int64)
        np.minimum.at(least, labels, np.arange(count))
        cluster = np.where((sizes[labels] > 1) & (first_equal >= 0), least[labels], -1) if count else np.empty(0, np.int64)
        return Duplicates(count, first_equal, near_pairs, similarity, cluster, candidates, len(pairs))

    def _verify(self, pairs: np.ndarray, texts_again: Iterable[str], count: int) -> tuple[np.ndarray, np.ndarray]:
        if not len(pairs):
            for _ in texts_again:  # the caller's second pass still runs to its end (it may check what it reads)
                pass
            return np.empty((0, 2), np.int64), np.empty(0, np.float64)
        needed = np.zeros(count, dtype=bool)
        needed[pairs.ravel()] = True
        sets: dict[int, np.ndarray] = {}
        batch: dict[bool, list[list[int]]] = {True: [], False: []}
        batch_index: dict[bool, list[int]] = {True: [], False: []}

        def flush(view: bool) -> None:
            if batch[view]:
                hashes, offsets = shingle_hashes(batch[view], self.shingle_size[view])
                for position, index in enumerate(batch_index[view]):
                    sets[index] = np.unique(hashes[offsets[position] : offsets[position + 1]])
                batch[view].clear()
                batch_index[view].clear()

        for index, text in enumerate(texts_again):
            if index < count and needed[index]:
                codes, view = self._codes(normalised_text(text))
                batch[view].append(codes)
                batch_index[view].append(index)
                if len(batch[view]) >= BATCH:
                    flush(view)
        flush(True)
        flush(False)
        similarity = np.empty(len(pairs), dtype=np.float64)
        for position, (left, right) in enumerate(pairs.tolist()):
            a, b = sets[left], sets[right]
            shared = len(np.intersect1d(a, b, assume_unique=True))
            similarity[position] = shared / (len(a) + len(b) - shared)
        keep = similarity >= self.threshold
        return pairs[keep], similarity[keep]
