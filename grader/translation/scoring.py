"""Score translations (predictions) against references: CrystalBLEU-4 and METEOR.

Every reference is a query that counts: a query without a prediction is scored
as an empty prediction (0 on both measures) and counted as missing. A
prediction for a query id that has no reference is an error. The reported
values are the unweighted means of the sentence-level scores over all
references.

Without training targets no n-gram is ignored and the BLEU measure is labelled
``BLEU-4`` (plain sentence BLEU-4), never ``CrystalBLEU-4``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.errors import InputError, RunFormatError
from grader.files import sha256_file
from grader.translation.files import iter_train_targets, read_predictions, read_references
from grader.translation.metrics import DEFAULT_IGNORED, MAX_NGRAM, METEOR_PARAMETERS, crystal_bleu, meteor, tokenize, trivially_shared_ngrams
from grader.translation.wordnet import WORDNET_VERSION, load_wordnet

CRYSTAL_BLEU = "CrystalBLEU-4"
PLAIN_BLEU = "BLEU-4"
METEOR = "METEOR"


@dataclass(frozen=True)
class IgnoredNGrams:
    """CrystalBLEU's ignore list and where it came from."""

    ngrams: frozenset[tuple[str, ...]]
    k: int
    source: str
    sha256: str
    targets: int

    @classmethod
    def from_file(cls, path: str | Path, k: int = DEFAULT_IGNORED) -> IgnoredNGrams:
        """The ``k`` most common 1- to 4-grams of the training targets in ``path``."""
        path = Path(path)
        count = 0

        def targets():
            nonlocal count
            for text in iter_train_targets(path):
                count += 1
                yield tokenize(text)

        ngrams = trivially_shared_ngrams(targets(), k)
        return cls(ngrams=frozenset(ngrams), k=k, source=str(path), sha256=sha256_file(path), targets=count)

    def describe(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "ignored": len(self.ngrams),
            "max_n": MAX_NGRAM,
            "train_targets": self.source,
            "train_targets_sha256": self.sha256,
            "train_target_count": self.targets,
        }


@dataclass(frozen=True)
class QueryScore:
    """The scores of one query."""

    query_id: str
    bleu: float
    meteor: float
    missing: bool


@dataclass(frozen=True)
class TranslationScores:
    """Per-query scores and their means."""

    bleu_measure: str
    per_query: tuple[QueryScore, ...]
    ignored: IgnoredNGrams | None
    wordnet: str

    @property
    def count(self) -> int:
        return len(self.per_query)

    @property
    def missing(self) -> int:
        return sum(score.missing for score in self.per_query)

    @property
    def mean_bleu(self) -> float:
        return math.fsum(s.bleu for s in self.per_query) / self.count

    @property
    def mean_meteor(self) -> float:
        return math.fsum(s.meteor for s in self.per_query) / self.count

    def as_json(self) -> dict[str, Any]:
        """The JSON document ``grader score-translation --json`` prints."""
        return {
            "measures": {self.bleu_measure: self.mean_bleu, METEOR: self.mean_meteor},
            "references": self.count,
            "predicted": self.count - self.missing,
            "missing_predictions": self.missing,
            "tokens": "whitespace",
            "bleu": {
                "measure": self.bleu_measure,
                "weights": [0.25, 0.25, 0.25, 0.25],
                "smoothing": None,
                "aggregate": "mean of sentence scores",
                "ignored_ngrams": None if self.ignored is None else self.ignored.describe(),
            },
            "meteor": {**METEOR_PARAMETERS, "wordnet": f"WordNet {WORDNET_VERSION} at {self.wordnet}", "aggregate": "mean of sentence scores"},
            "per_query": {s.query_id: {self.bleu_measure: s.bleu, METEOR: s.meteor, "missing": s.missing} for s in self.per_query},
        }


def score_translations(
    references: Mapping[str, str],
    predictions: Mapping[str, str],
    *,
    ignored: IgnoredNGrams | None = None,
    nltk_data: str | Path | None = None,
    wordnet: Any = None,
) -> TranslationScores:
    """Score ``predictions`` (query id -> text) against ``references`` (query id -> text).

    ``predictions`` must not name a query absent from ``references``
    (:class:`grader.errors.InputError`; :func:`score_files` reports the file line instead).
    ``wordnet`` defaults to :func:`load_wordnet` of ``nltk_data``.
    """
    unknown = [qid for qid in predictions if qid not in references]
    if unknown:
        raise InputError(f"predictions for unknown query ids: {', '.join(map(repr, unknown[:5]))}")
    if wordnet is None:
        wordnet = load_wordnet(nltk_data)
    ignoring = ignored.ngrams if ignored is not None else None
    scores = []
    for query_id, reference_text in references.items():
        reference = tokenize(reference_text)
        missing = query_id not in predictions
        hypothesis = [] if missing else tokenize(predictions[query_id])
        scores.append(QueryScore(query_id, crystal_bleu(reference, hypothesis, ignoring), meteor(reference, hypothesis, wordnet), missing))
    return TranslationScores(
        bleu_measure=CRYSTAL_BLEU if ignored is not None else PLAIN_BLEU,
        per_query=tuple(scores),
        ignored=ignored,
        wordnet=_reader_folder(wordnet),
    )


def _reader_folder(wordnet: Any) -> str:
    """The folder a WordNet reader reads (``""`` if it does not say)."""
    root = getattr(wordnet, "root", None)
    return str(getattr(root, "path", root) or "")


def score_files(
    references_path: str | Path,
    predictions_path: str | Path,
    *,
    train_targets: str | Path | None = None,
    k: int = DEFAULT_IGNORED,
    nltk_data: str | Path | None = None,
) -> TranslationScores:
    """Read the files and score them; errors name ``file:line: field``.

    WordNet is loaded first, so a missing WordNet fails before any file is read.
    """
    wordnet = load_wordnet(nltk_data)
    references = read_references(references_path)
    predicted = read_predictions(predictions_path)
    for query_id, (line, _) in predicted.items():
        if query_id not in references:
            raise RunFormatError(
                f"unknown query id {query_id!r} (not in the references {references_path})", path=predictions_path, line=line, field="/query_id"
            )
    ignored = IgnoredNGrams.from_file(train_targets, k) if train_targets is not None else None
    predictions = {query_id: text for query_id, (_, text) in predicted.items()}
    return score_translations(references, predictions, ignored=ignored, wordnet=wordnet)
