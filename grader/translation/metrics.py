"""Sentence-level CrystalBLEU-4 and METEOR over whitespace tokens.

* **CrystalBLEU-4** (Eghbali & Pradel 2022) is BLEU-4 computed after removing the
  *trivially shared* n-grams: the ``k`` (500) most frequent 1- to 4-grams of the
  training targets. It is the ``crystalbleu`` package's ``sentence_bleu`` with
  uniform weights, no smoothing, one reference. Frequencies are counted over
  the n-grams *within* each target (none spans two targets), for n = 1..4 in
  that order; ``Counter.most_common`` keeps ties in that counting order (lower
  n first, then first appearance).
* **METEOR** is NLTK's ``meteor_score`` with ``alpha=0.9, beta=3, gamma=0.5``
  (exact, Porter-stem and WordNet-synonym matching; tokens lower-cased), one
  reference, WordNet 3.0 read offline (:mod:`grader.translation.wordnet`).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from grader.errors import UsageError

#: BLEU-4: uniform weights over 1- to 4-grams
BLEU_WEIGHTS = (0.25, 0.25, 0.25, 0.25)
MAX_NGRAM = 4
#: how many of the most common training n-grams CrystalBLEU ignores
DEFAULT_IGNORED = 500
METEOR_PARAMETERS = {"alpha": 0.9, "beta": 3.0, "gamma": 0.5}

NGram = tuple[str, ...]


def tokenize(text: str) -> list[str]:
    """Whitespace tokens (``str.split()``: runs of whitespace, no empty tokens)."""
    return text.split()


def ngram_frequencies(targets: Iterable[Sequence[str]], max_n: int = MAX_NGRAM) -> Counter[NGram]:
    """Counts of every 1- to ``max_n``-gram within each target.

    The result's insertion order is all unigrams (in order of first appearance),
    then all bigrams, and so on: the order ``Counter.most_common`` breaks ties by.
    """
    per_order: list[Counter[NGram]] = [Counter() for _ in range(max_n)]
    for tokens in targets:
        tokens = tuple(tokens)
        for n in range(1, min(max_n, len(tokens)) + 1):
            per_order[n - 1].update(tokens[i : i + n] for i in range(len(tokens) - n + 1))
    merged: Counter[NGram] = Counter()
    for counts in per_order:
        merged.update(counts)
    return merged


def trivially_shared_ngrams(targets: Iterable[Sequence[str]], k: int = DEFAULT_IGNORED, max_n: int = MAX_NGRAM) -> dict[NGram, int]:
    """The ``k`` most common 1- to ``max_n``-grams of ``targets`` with their counts (CrystalBLEU's ignore list)."""
    if k < 0:
        raise UsageError("k must be >= 0")
    if k == 0:
        return {}
    return dict(ngram_frequencies(targets, max_n).most_common(k))


def crystal_bleu(reference: Sequence[str], hypothesis: Sequence[str], ignoring: Any = None) -> float:
    """Sentence CrystalBLEU-4 of ``hypothesis`` against one ``reference`` (token lists).

    ``ignoring`` is a container of n-gram tuples (``None``: plain BLEU-4). No
    smoothing: a hypothesis sharing no 4-gram with the reference scores (almost) 0,
    as ``crystalbleu``/NLTK compute it.
    """
    from crystalbleu import sentence_bleu

    with warnings.catch_warnings():
        # "The hypothesis contains 0 counts of 4-gram overlaps": expected without smoothing.
        warnings.simplefilter("ignore")
        return float(sentence_bleu([list(reference)], list(hypothesis), weights=BLEU_WEIGHTS, ignoring=ignoring))


def meteor(reference: Sequence[str], hypothesis: Sequence[str], wordnet: Any) -> float:
    """METEOR of ``hypothesis`` against one ``reference`` (token lists), with the given WordNet reader."""
    from nltk.translate.meteor_score import meteor_score

    return float(meteor_score([list(reference)], list(hypothesis), wordnet=wordnet, **METEOR_PARAMETERS))
