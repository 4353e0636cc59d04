"""What a worker's kept runs index: recorded beside them, so that a re-scoring never reads them against other data.

A compact run holds indexes into the canonical order of the corpus and of the judged
queries (:mod:`grader.runs.compact`). A corrected qrels file that changes only grades keeps
that order; one that judges other queries, or a changed corpus, would make the same indexes
name other queries or documents (silently, when the counts happen to agree). So the
server records, when it scores a worker's runs, each task's ranking digest
(:meth:`grader.data.task.Task.ranking_digest`: corpus, queries, judged ids; never the
judgements) in ``ranking.json`` beside them, and ``grader admin rejudge --rescore``
re-scores only runs whose digests still hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

from grader import jsonio
from grader.data.registry import resolve_benchmark
from grader.files import atomic_write_bytes

#: The record's file name in ``state/runs/<id>/<attempt>/``.
RANKING_FILE = "ranking.json"
#: The largest record read back (a digest per task).
RANKING_MAX_BYTES = 1 << 20


def ranking_digests(benchmark_target: str, tasks: Sequence[str], split: str) -> dict[str, str]:
    """Per task, the digest of the corpus, the queries and the judged query ids of ``split`` as the data is now."""
    benchmark = resolve_benchmark(benchmark_target)
    return {name: benchmark.task(name).ranking_digest(list(benchmark.task(name).qrels(split))) for name in tasks}


@cache
def _at_start(benchmark_target: str, tasks: tuple[str, ...], split: str) -> dict[str, str]:
    """:func:`ranking_digests`, read once per server process (the server pins its data at start)."""
    return ranking_digests(benchmark_target, tasks, split)


def record(folder: Path, benchmark_target: str, tasks: Sequence[str], split: str) -> None:
    """Write the ranking digests of the data the runs in ``folder`` were scored on (at acceptance)."""
    digests = _at_start(benchmark_target, tuple(tasks), split)
    atomic_write_bytes(folder / RANKING_FILE, jsonio.dumps(digests, ensure_ascii=True).encode("ascii"))


def recorded(folder: Path) -> dict[str, str] | None:
    """The ranking digests recorded beside the runs in ``folder``; None when there is no (readable) record."""
    path = folder / RANKING_FILE
    if not path.is_file() or path.is_symlink() or path.stat().st_size > RANKING_MAX_BYTES:
        return None
    data = jsonio.loads(path.read_bytes())
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        return None
    return data
