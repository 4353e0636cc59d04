"""The contamination audit's comparison: a participant's training sketch against a task's test split.

Pure: texts in, counts out (no file is read here but through the caller). A test item (a test query's text, or
a document judged relevant to a test query) is **found** when one of its windows and one of the sketch's rows
agree on at least ``ceil(threshold * num_perm)`` components, i.e. their estimated Jaccard similarity is at least
the threshold (:data:`DEFAULT_THRESHOLD`). Candidates come from LSH banding (:mod:`grader.integrity.minhash`),
with bands chosen so that a window at exactly the threshold is a candidate with probability >= 0.99.
An item shorter than the view's minimum (:class:`SketchParameters`) is **not audited**: it is counted apart and
never found.

The figures cover the whole split (every test query), never a part of it; what of them may be shown to the
participant is decided in one place, :mod:`grader.integrity.release`. docs/contamination.md defines each figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from grader.integrity.minhash import band_keys, lsh_parameters
from grader.integrity.sketch_file import TrainingSketch
from grader.integrity.sketch_text import sketch_signatures

#: Least estimated Jaccard similarity of a test item's window and a training window that makes the item found.
DEFAULT_THRESHOLD = 0.5
#: Least estimated Jaccard similarity of a short item's statement set (docs/contamination.md, step 7) and a
#: training text's that makes the item found: higher than a window's, because a disguised copy keeps every
#: statement feature (Jaccard 1) while unrelated short code shares many.
STATEMENT_THRESHOLD = 0.8
#: Training rows checked per test window and band (a bucket of many look-alikes is bounded work).
BUCKET_LIMIT = 64


@dataclass(frozen=True)
class Matches:
    """Per text given to :func:`find_copies`: whether it was audited (long enough) and whether it was found."""

    audited: np.ndarray
    found: np.ndarray


def _candidates(train_keys: np.ndarray, order: np.ndarray, item_keys: np.ndarray) -> np.ndarray:
    """Pairs ``(item row, training row)`` whose band keys are equal, at most :data:`BUCKET_LIMIT` per item row."""
    sorted_keys = train_keys[order]
    low = np.searchsorted(sorted_keys, item_keys, side="left")
    high = np.minimum(np.searchsorted(sorted_keys, item_keys, side="right"), low + BUCKET_LIMIT)
    counts = high - low
    items = np.repeat(np.arange(len(item_keys)), counts)
    starts = np.repeat(low - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.stack((items, order[starts + np.arange(int(counts.sum()))]), axis=1)


class _Index:
    """The sketch's rows banded for one threshold (computed on first use: statement sets may never be needed)."""

    def __init__(self, sketch: TrainingSketch, threshold: float) -> None:
        self.rows = sketch.rows
        self.bands, self.band_rows = lsh_parameters(threshold, sketch.parameters.num_perm)
        self.least = math.ceil(threshold * sketch.parameters.num_perm - 1e-9)
        self.keys = list(band_keys(sketch.rows, self.bands, self.band_rows))
        self.orders = [np.argsort(key, kind="stable") for key in self.keys]

    def found(self, item_rows: np.ndarray) -> np.ndarray:
        """Which of ``item_rows`` agree with some row of the sketch on at least ``least`` components."""
        hit = np.zeros(len(item_rows), dtype=bool)
        if not len(item_rows) or not len(self.rows):
            return hit
        item_keys = band_keys(item_rows, self.bands, self.band_rows)
        pairs = np.concatenate([_candidates(key, order, item_key) for key, order, item_key in zip(self.keys, self.orders, item_keys)])
        if len(pairs):
            agree = np.count_nonzero(item_rows[pairs[:, 0]] == self.rows[pairs[:, 1]], axis=1)
            hit[pairs[agree >= self.least, 0]] = True
        return hit


def find_copies(sketch: TrainingSketch, texts: Iterable[str], threshold: float = DEFAULT_THRESHOLD) -> Matches:
    """Which of ``texts`` have a near copy among the sketch's rows: a window at estimated Jaccard >= ``threshold``
    or, for short code (a statement set), at >= :data:`STATEMENT_THRESHOLD`."""
    indexes: dict[bool, _Index] = {}
    text_list = list(texts)
    audited = np.zeros(len(text_list), dtype=bool)
    found = np.zeros(len(text_list), dtype=bool)
    for signed in sketch_signatures(text_list, sketch.parameters, training=False):
        audited[signed.owners] = True
        for statements in (False, True):
            chosen = np.flatnonzero(signed.statements == statements)
            if not len(chosen) or sketch.count == 0:
                continue
            if statements not in indexes:
                indexes[statements] = _Index(sketch, STATEMENT_THRESHOLD if statements else threshold)
            found[signed.owners[chosen[indexes[statements].found(signed.rows[chosen])]]] = True
    return Matches(audited, found)


@dataclass(frozen=True)
class SplitOverlap:
    """A task's whole split against a sketch: raw counts (the release rule decides what of them is shown)."""

    task: str
    split: str
    #: queries with at least one judgement in the split: every figure is over all of them
    test_queries: int
    #: test queries with something audited: their own text, or a relevant document, long enough
    audited_queries: int
    #: test queries whose own text was found
    queries_found: int
    #: distinct documents judged relevant (> 0) to a test query, and how many of them were found
    relevant_documents: int
    documents_found: int
    #: test queries whose text or one of whose relevant documents was found: the figure that is released
    touched: int


def split_overlap(
    sketch: TrainingSketch,
    *,
    task: str,
    split: str,
    judgements: Mapping[str, Mapping[str, int]],
    query_texts: Mapping[str, str],
    document_texts: Mapping[str, str],
    threshold: float = DEFAULT_THRESHOLD,
) -> SplitOverlap:
    """Compare ``sketch`` with every test query of a split and every document judged relevant to one.

    ``judgements`` maps each query of the split to its judged documents; a test query is one with at least one;
    its text is ``query_texts[query]`` and a relevant document's ``document_texts[document]`` (a missing text
    counts as not audited)."""
    test_queries = sorted(query for query, judged in judgements.items() if judged)
    relevant = {query: sorted(doc for doc, grade in judgements[query].items() if grade > 0) for query in test_queries}
    documents = sorted({doc for docs in relevant.values() for doc in docs})
    # One comparison of queries and documents together: the sketch is indexed once.
    texts = [query_texts.get(query, "") for query in test_queries] + [document_texts.get(doc, "") for doc in documents]
    matches = find_copies(sketch, texts, threshold)
    queries_end = len(test_queries)
    query_matches = Matches(matches.audited[:queries_end], matches.found[:queries_end])
    document_matches = Matches(matches.audited[queries_end:], matches.found[queries_end:])
    doc_index = {doc: position for position, doc in enumerate(documents)}
    touched = audited = 0
    for position, query in enumerate(test_queries):
        docs = [doc_index[doc] for doc in relevant[query]]
        if query_matches.audited[position] or any(document_matches.audited[doc] for doc in docs):
            audited += 1
        if query_matches.found[position] or any(document_matches.found[doc] for doc in docs):
            touched += 1
    return SplitOverlap(
        task=task,
        split=split,
        test_queries=len(test_queries),
        audited_queries=audited,
        queries_found=int(query_matches.found.sum()),
        relevant_documents=len(documents),
        documents_found=int(document_matches.found.sum()),
        touched=touched,
    )


def needed_texts(judgements: Mapping[str, Mapping[str, int]]) -> tuple[set[str], set[str]]:
    """The test queries and relevant documents whose texts :func:`split_overlap` needs."""
    queries = {query for query, judged in judgements.items() if judged}
    documents = {doc for query in queries for doc, grade in judgements[query].items() if grade > 0}
    return queries, documents


def describe(overlaps: Sequence[SplitOverlap]) -> list[str]:
    """One line per task of raw figures (for public splits, where nothing is secret)."""
    lines = []
    for o in overlaps:
        share = f"{o.touched / o.test_queries:.1%}" if o.test_queries else "n/a"
        lines.append(
            f"{o.task} ({o.split}): {o.touched} of {o.test_queries} test queries touched ({share}); "
            f"{o.queries_found} query texts and {o.documents_found} of {o.relevant_documents} relevant documents found; "
            f"{o.test_queries - o.audited_queries} test queries too short to audit"
        )
    return lines
