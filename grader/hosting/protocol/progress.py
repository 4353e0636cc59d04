"""The words of a grade's progress: one line per task, the same in a worker's log, ``grader status`` and ``/me``.

Every figure in them is a count ``grader check`` already shows (a task's documents) or one of the
grade's own steps; nothing of the hidden split's content. The words are plain text: the caller escapes
them for its terminal or page (a task name comes from the server, a worker's report from the worker).
"""

from __future__ import annotations

from grader.hosting.protocol.messages import Phase, QueueView, TaskProgress


def task_words(progress: TaskProgress) -> str:
    """One task's progress: ``T: encoding 1200 of 5000 documents, shard 2 of 4``, ``T: searching``, ``T: ranked``."""
    words = progress.phase.value
    if progress.phase is Phase.ENCODING and progress.documents is not None:
        words = f"encoding {progress.documents} documents"
        if progress.encoded is not None:
            words = f"encoding {progress.encoded} of {progress.documents} documents"
    if progress.shards is not None:
        done = progress.shards_done or 0
        words += (
            f", shard {min(done + 1, progress.shards)} of {progress.shards}"
            if done < progress.shards
            else f", {progress.shards} of {progress.shards} shards ranked"
        )
    return f"{progress.task}: {words}"


def queue_words(view: QueueView) -> str:
    """Where a waiting or running grade is, in one line: place, estimate, why it waits."""
    parts = []
    if view.position is not None:
        parts.append(f"position {view.position} in the queue ({view.ahead} ahead, {view.running} running)")
    if view.starts_at is not None and view.position is not None:
        parts.append(f"starts about {view.starts_at}")
    elif view.starts_at is not None:
        parts.append(f"started {view.starts_at}")
    if view.ends_at is not None:
        parts.append(f"ends about {view.ends_at}")
    parts.append(f"{view.free_workers} of {view.workers} workers free")
    if view.waiting is not None:
        parts.append(f"waiting: {view.waiting}")
    return "; ".join(parts)
