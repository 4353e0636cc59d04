"""``grader lint``'s findings on one task: what they are and which test queries each touches.

docs/lint.md defines every finding; in short, for the task's corpus, queries and judgements:

* ``exact_duplicate_documents``: groups of two or more documents of equal normalised text;
* ``near_duplicate_documents``: pairs of documents (first of their normalised text) whose shingle sets have
  exact Jaccard similarity >= the threshold (found by MinHash LSH, then verified);
* ``cross_split_queries``: test queries also judged in another split, or whose normalised text equals, or is
  near (same test), that of a query judged in another split;
* ``relevant_document_duplicated``: test queries with a relevant document (judgement > 0) whose duplicate
  cluster holds a document not judged relevant for that query;
* ``empty_texts`` and ``oversized_texts``: documents and queries whose normalised text is empty, or whose
  text (a document's ``title + " " + text``) is longer than ``max_chars`` characters;
* ``missing_judged_ids``: judgements naming a query absent from the queries, or a document absent from the corpus.

A test query is one with at least one judgement in the test split; a finding *touches* a test query as each
finding's entry in :data:`TOUCHES` says, and its share is touched test queries / test queries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grader.data.qrels import Qrels
from grader.data.task import Task, document_text
from grader.integrity.duplicates import DEFAULT_THRESHOLD, DuplicateFinder, Duplicates

#: Default longest text, in characters, before it is oversized.
DEFAULT_MAX_CHARS = 32_768
#: Default examples listed per finding.
DEFAULT_EXAMPLES = 10

#: Every finding, in report order, with when it touches a test query.
TOUCHES: Mapping[str, str] = {
    "exact_duplicate_documents": "a document judged for it (any judgement) is in a group",
    "near_duplicate_documents": "a document judged for it (any judgement) is in a near pair",
    "cross_split_queries": "it is the test query found",
    "relevant_document_duplicated": "it is the test query found",
    "empty_texts": "it is empty, or a document judged for it is",
    "oversized_texts": "it is oversized, or a document judged for it is",
    "missing_judged_ids": "it is missing from the queries, or a document judged for it is missing from the corpus",
}


@dataclass(frozen=True)
class LintSettings:
    """What a lint looks for; every value is in the report."""

    threshold: float = DEFAULT_THRESHOLD
    max_chars: int = DEFAULT_MAX_CHARS
    split: str = "test"
    examples: int = DEFAULT_EXAMPLES


@dataclass
class Finding:
    """One finding of one task: how many items, which test queries they touch, and the first examples."""

    count: int = 0
    touched: set[str] = field(default_factory=set)
    examples: list[Any] = field(default_factory=list)

    def note(self, example: Any, limit: int) -> None:
        self.count += 1
        if len(self.examples) < limit:
            self.examples.append(example)


@dataclass(frozen=True)
class TaskLint:
    """The findings of one task, and its duplicate clusters (document ids, each sorted by corpus order)."""

    task: str
    documents: int
    queries: int
    test_queries: int
    findings: dict[str, Finding]
    clusters: list[list[str]]
    candidate_pairs: int
    checked_pairs: int


def _corpus_texts(task: Task) -> Iterator[tuple[str, str]]:
    for document in task.iter_corpus():
        yield document.id, document_text(document.title, document.text)


def lint_task(task: Task, settings: LintSettings) -> TaskLint:
    """Lint one task (two passes over its corpus, one over its queries)."""
    limit = settings.examples
    findings = {name: Finding() for name in TOUCHES}
    splits = {split: task.qrels(split) for split in task.splits()}
    test = splits.get(settings.split, Qrels({}))
    test_queries = {query for query, docs in test.items() if docs}
    judged_for: dict[str, list[str]] = {}  # document -> test queries judging it
    for query in test_queries:
        for document in test[query]:
            judged_for.setdefault(document, []).append(query)

    # Documents: pass 1 (ids, sizes, signatures), pass 2 (verification).
    finder = DuplicateFinder(settings.threshold)
    ids: list[str] = []
    for doc_id, text in _corpus_texts(task):
        ids.append(doc_id)
        normalised = finder.add(text)
        if not normalised:
            findings["empty_texts"].note({"kind": "document", "id": doc_id}, limit)
            findings["empty_texts"].touched.update(judged_for.get(doc_id, ()))
        if len(text) > settings.max_chars:
            findings["oversized_texts"].note({"kind": "document", "id": doc_id, "characters": len(text)}, limit)
            findings["oversized_texts"].touched.update(judged_for.get(doc_id, ()))
    duplicates = finder.finish(text for _, text in _corpus_texts(task))
    clusters = _document_findings(duplicates, ids, findings, judged_for, test, limit)

    # Queries: sizes, then overlap between the test split and the others.
    queries: dict[str, str] = {}
    for entry in task.iter_queries():
        queries[entry.id] = entry.text
    for query_id, text in queries.items():
        touched = [query_id] if query_id in test_queries else []
        if not " ".join(text.split()):
            findings["empty_texts"].note({"kind": "query", "id": query_id}, limit)
            findings["empty_texts"].touched.update(touched)
        if len(text) > settings.max_chars:
            findings["oversized_texts"].note({"kind": "query", "id": query_id, "characters": len(text)}, limit)
            findings["oversized_texts"].touched.update(touched)
    _cross_split(queries, splits, settings, findings)
    _missing_ids(set(ids), queries, splits, findings, settings.split, limit)
    return TaskLint(
        task=task.name,
        documents=len(ids),
        queries=len(queries),
        test_queries=len(test_queries),
        findings=findings,
        clusters=clusters,
        candidate_pairs=duplicates.candidates,
        checked_pairs=duplicates.checked,
    )


def _document_findings(
    duplicates: Duplicates,
    ids: list[str],
    findings: dict[str, Finding],
    judged_for: Mapping[str, list[str]],
    test: Qrels,
    limit: int,
) -> list[list[str]]:
    exact = findings["exact_duplicate_documents"]
    for group in duplicates.exact_groups():
        members = [ids[i] for i in group]
        exact.note(members, limit)
        for member in members:
            exact.touched.update(judged_for.get(member, ()))
    near = findings["near_duplicate_documents"]
    for (left, right), similarity in zip(duplicates.near_pairs.tolist(), duplicates.near_similarity.tolist()):
        near.note({"documents": [ids[left], ids[right]], "jaccard": round(similarity, 6)}, limit)
        for member in (ids[left], ids[right]):
            near.touched.update(judged_for.get(member, ()))
    clusters = [[ids[i] for i in group] for group in duplicates.clusters()]
    cluster_of = {member: number for number, members in enumerate(clusters) for member in members}
    found = findings["relevant_document_duplicated"]
    for query in sorted({q for qs in judged_for.values() for q in qs}):
        relevant = {doc for doc, grade in test[query].items() if grade > 0}
        for document in sorted(relevant):
            number = cluster_of.get(document)
            if number is None:
                continue
            others = [member for member in clusters[number] if member not in relevant]
            if others:
                found.note({"query": query, "document": document, "duplicates": others[:limit]}, limit)
                found.touched.add(query)
                break
    return clusters


def _cross_split(queries: Mapping[str, str], splits: Mapping[str, Qrels], settings: LintSettings, findings: dict[str, Finding]) -> None:
    test = splits.get(settings.split, Qrels({}))
    test_ids = sorted(query for query, docs in test.items() if docs)
    other_splits: dict[str, str] = {}  # query judged in another split -> the first such split (by name)
    for name in sorted(splits):
        if name != settings.split:
            for query, docs in splits[name].items():
                if docs:
                    other_splits.setdefault(query, name)
    found = findings["cross_split_queries"]
    hits: dict[str, dict[str, Any]] = {}
    for query in test_ids:
        if query in other_splits:
            hits[query] = {"query": query, "other": query, "split": other_splits[query], "match": "same id"}
    others = [query for query in sorted(other_splits) if query in queries and query not in test]
    mine = [query for query in test_ids if query in queries]
    if others and mine:
        texts = [queries[query] for query in mine + others]
        finder = DuplicateFinder(settings.threshold)
        for text in texts:
            finder.add(text)
        duplicates = finder.finish(texts)
        boundary = len(mine)
        for group in duplicates.exact_groups():
            tests = [i for i in group if i < boundary]
            rest = [i for i in group if i >= boundary]
            for i in tests:
                if rest and mine[i] not in hits:
                    other = others[rest[0] - boundary]
                    hits[mine[i]] = {"query": mine[i], "other": other, "split": other_splits[other], "match": "equal text"}
        first_equal = duplicates.first_equal
        for (left, right), similarity in zip(duplicates.near_pairs.tolist(), duplicates.near_similarity.tolist()):
            # Pairs join the first texts of equal groups: every member of either group is paired.
            left_members = np.flatnonzero(first_equal == left).tolist()
            right_members = np.flatnonzero(first_equal == right).tolist()
            for a in left_members:
                for b in right_members:
                    test_side, other_side = (a, b) if a < boundary <= b else (b, a) if b < boundary <= a else (None, None)
                    if test_side is None or other_side is None or mine[test_side] in hits:
                        continue
                    other = others[other_side - boundary]
                    hits[mine[test_side]] = {
                        "query": mine[test_side],
                        "other": other,
                        "split": other_splits[other],
                        "match": "near",
                        "jaccard": round(similarity, 6),
                    }
    for query in sorted(hits):
        found.note(hits[query], settings.examples)
        found.touched.add(query)


def _missing_ids(
    corpus: set[str],
    queries: Mapping[str, str],
    splits: Mapping[str, Qrels],
    findings: dict[str, Finding],
    test_split: str,
    limit: int,
) -> None:
    found = findings["missing_judged_ids"]
    for name in sorted(splits):
        for query, docs in splits[name].items():
            for document in docs:
                missing = [what for what, absent in (("query", query not in queries), ("document", document not in corpus)) if absent]
                if missing:
                    found.note({"split": name, "query": query, "document": document, "missing": missing}, limit)
                    if name == test_split:
                        found.touched.add(query)
