"""The read-only ``/input`` folder of a task: only what a submission may see.

Judgements never enter it: the queries are only those judged in the graded
split (so a container cannot learn which other queries exist), without any
relevance information. Ids are pseudonyms and both files are sorted by them
(:mod:`grader.sandbox.blinding`): neither an id nor a position tells a container
anything about relevance.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from grader import jsonio
from grader.data.task import Document, Query
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindedIds, BlindingKey, Preblinded, blind

PROTOCOL_VERSION = 1
_Item = TypeVar("_Item", Query, Document)


@dataclass(frozen=True)
class StagedTask:
    """What was staged: the folder, the pseudonyms the container saw (in its order) and the way back to the real ids.

    ``real_query_ids`` are the real query ids sorted byte-wise and ``real_doc_ids``
    the documents in the order given: the order in which the grader hands back
    what the container returned (:mod:`grader.collect.unblind`).
    """

    folder: Path
    queries: BlindedIds
    documents: BlindedIds
    real_query_ids: list[str]
    real_doc_ids: list[str]
    task_json: dict[str, Any]
    #: The key's scheme and id, for the report (never the key).
    blinding: dict[str, str]

    @property
    def query_ids(self) -> tuple[str, ...]:
        """The query pseudonyms, in the order of the staged ``queries.jsonl``."""
        return self.queries.staged

    @property
    def doc_ids(self) -> tuple[str, ...]:
        """The document pseudonyms, in the order of the staged ``corpus.jsonl``."""
        return self.documents.staged


def _write_jsonl(path: Path, records: Iterable[dict[str, str]]) -> None:
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
    key: BlindingKey | Preblinded,
    query_prefix: str = "",
    document_prefix: str = "",
    encode: str | None = None,
) -> StagedTask:
    """Write ``task.json``, ``queries.jsonl`` and ``corpus.jsonl`` into ``folder``, under pseudonyms sorted by pseudonym.

    ``key`` is the blinding key: the same key, task and ids always stage the same
    files, whatever the order of ``queries`` and ``documents``. A worker's exported copy
    (:class:`Preblinded`) is staged as it is: its ids already are the pseudonyms.
    ``encode`` (``queries`` or ``documents``; the runner image only) asks for one side's
    vectors alone: what a shard job needs (docs/protocol.md).
    """
    ordered_queries = sorted(queries, key=lambda q: q.id.encode("utf-8", "surrogatepass"))
    # Both computed (and collision-checked) before anything is written.
    blind_queries = blind(key, task, QUERY, [q.id for q in ordered_queries])
    blind_documents = blind(key, task, DOCUMENT, [d.id for d in documents])
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
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
    if encode is not None:
        task_json["encode"] = encode
    jsonio.write_json(folder / "task.json", task_json, ensure_ascii=True, mode=0o644)
    _write_jsonl(folder / "queries.jsonl", _staged_records(blind_queries, ordered_queries, lambda q: {"text": q.text}))
    _write_jsonl(folder / "corpus.jsonl", _staged_records(blind_documents, documents, lambda d: {"title": d.title, "text": d.text}))
    return StagedTask(
        folder,
        blind_queries,
        blind_documents,
        [q.id for q in ordered_queries],
        [d.id for d in documents],
        task_json,
        key.report(),
    )


def staged_ids(
    key: BlindingKey | Preblinded, task: str, queries: Sequence[Query], documents: Sequence[Document]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The query and document ids a container of ``task`` sees under ``key`` (pseudonyms, in the staged files' order), without staging."""
    return blind(key, task, QUERY, [q.id for q in queries]).staged, blind(key, task, DOCUMENT, [d.id for d in documents]).staged


def _staged_records(ids: BlindedIds, items: Sequence[_Item], fields: Callable[[_Item], dict[str, str]]) -> Iterator[dict[str, str]]:
    """Each item under its pseudonym, in staged (pseudonym) order."""
    by_row = np.argsort(ids.rows, kind="stable")  # staged row -> index in ``items``
    for row, index in enumerate(by_row.tolist()):
        yield {"_id": ids.staged[row], **fields(items[index])}
