"""The read-only ``/input`` folder of a task: only what a submission may see.

Judgements never enter it: the queries are only those judged in the graded
split (so a container cannot learn which other queries exist), without any
relevance information.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.data.task import Document, Query

PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class StagedTask:
    """What was staged: the folder and the ids, in the order the container saw them."""

    folder: Path
    query_ids: list[str]
    doc_ids: list[str]
    task_json: dict[str, Any]


def _write_jsonl(path: Path, records: list[dict[str, str]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(jsonio.dumps(record) + "\n")
    os.chmod(path, 0o644)


def stage_task(
    folder: Path,
    *,
    task: str,
    split: str,
    mode: str,
    top_k: int,
    queries: list[Query],
    documents: list[Document],
    query_prefix: str = "",
    document_prefix: str = "",
) -> StagedTask:
    """Write ``task.json``, ``queries.jsonl`` (sorted by id) and ``corpus.jsonl`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    ordered_queries = sorted(queries, key=lambda q: q.id.encode("utf-8"))
    task_json = {
        "protocol": PROTOCOL_VERSION,
        "task": task,
        "split": split,
        "mode": mode,
        "top_k": top_k,
        "query_prefix": query_prefix,
        "document_prefix": document_prefix,
        "queries": len(ordered_queries),
        "documents": len(documents),
    }
    jsonio.write_json(folder / "task.json", task_json, ensure_ascii=True, mode=0o644)
    _write_jsonl(folder / "queries.jsonl", [{"_id": q.id, "text": q.text} for q in ordered_queries])
    _write_jsonl(folder / "corpus.jsonl", [{"_id": d.id, "title": d.title, "text": d.text} for d in documents])
    return StagedTask(folder, [q.id for q in ordered_queries], [d.id for d in documents], task_json)
