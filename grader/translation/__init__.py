"""CAT's translation measures: CrystalBLEU-4 and METEOR of predicted target sequences.

``grader score-translation`` scores a ``translate``-mode predictions file
against references; see ``docs/cat.md`` for the recipes.
"""

from __future__ import annotations

from grader.translation.metrics import crystal_bleu, meteor, tokenize, trivially_shared_ngrams
from grader.translation.scoring import IgnoredNGrams, QueryScore, TranslationScores, score_files, score_translations
from grader.translation.wordnet import WordNetUnavailable, load_wordnet

__all__ = [
    "IgnoredNGrams",
    "QueryScore",
    "TranslationScores",
    "WordNetUnavailable",
    "crystal_bleu",
    "load_wordnet",
    "meteor",
    "score_files",
    "score_translations",
    "tokenize",
    "trivially_shared_ngrams",
]
