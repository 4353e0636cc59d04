"""The contamination audit of a benchmark's tasks: read each task's split, then compare (:mod:`.contamination`), then release (:mod:`.release`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from grader.data.task import Task, document_text
from grader.integrity.contamination import DEFAULT_THRESHOLD, SplitOverlap, needed_texts, split_overlap
from grader.integrity.release import release
from grader.integrity.sketch_file import TrainingSketch, encode


def audit_task(task: Task, split: str, sketch: TrainingSketch, threshold: float = DEFAULT_THRESHOLD) -> SplitOverlap:
    """``sketch`` against every test query of ``task``'s ``split`` and their relevant documents."""
    judgements = {query: dict(docs) for query, docs in task.qrels(split).items()}
    queries, documents = needed_texts(judgements)
    query_texts = {entry.id: entry.text for entry in task.iter_queries() if entry.id in queries}
    document_texts = {doc.id: document_text(doc.title, doc.text) for doc in task.iter_corpus() if doc.id in documents}
    return split_overlap(
        sketch, task=task.name, split=split, judgements=judgements, query_texts=query_texts, document_texts=document_texts, threshold=threshold
    )


def audit_tasks(tasks: Sequence[Task], split: str, sketch: TrainingSketch) -> list[SplitOverlap]:
    """:func:`audit_task` of each task, in order."""
    return [audit_task(task, split, sketch) for task in tasks]


def released_block(tasks: Sequence[Task], split: str, sketch: TrainingSketch) -> dict[str, object]:
    """A hosted report's ``contamination`` block: each task's whole ``split`` audited, only as :func:`release` lets it show.

    The sketch is named by the SHA-256 of its canonical bytes (the file a participant made: the reader takes
    only the canonical form), so anyone holding the file can tell which sketch a signed figure is about.
    """
    return {
        "sketch_sha256": hashlib.sha256(encode(sketch)).hexdigest(),
        "windows": sketch.count,
        "tasks": [release(overlap).as_dict() for overlap in audit_tasks(tasks, split, sketch)],
    }
