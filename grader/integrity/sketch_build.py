"""Build a training sketch from texts (``grader sketch-training``), bounded by the file's cap as it goes.

With ``workers > 1`` batches of texts are sketched in that many spawned processes, at most two batches per
process in flight (so a large corpus is read as fast as it is sketched, never all at once); the rows are made
distinct and sorted at the end, so the file's bytes do not depend on the number of workers or on which batch
finished first.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import islice

import numpy as np

from grader.errors import UsageError
from grader.integrity.sketch_file import DEFAULT_MAX_BYTES, TrainingSketch, distinct_sorted, encoded_size
from grader.integrity.sketch_text import SketchParameters, sketch_signatures

#: Texts handed to a worker process at a time.
WORKER_BATCH = 2048


def _max_rows(max_bytes: int, num_perm: int) -> int:
    return max(0, (max_bytes - encoded_size(0, num_perm)) // (2 * num_perm))


def _batch_rows(texts: list[str], parameters: SketchParameters) -> np.ndarray:
    """Every window's signature of ``texts`` (run in a worker process)."""
    parts = [signed.rows for signed in sketch_signatures(texts, parameters, training=True)]
    return np.concatenate(parts) if parts else np.zeros((0, parameters.num_perm), dtype=np.uint16)


def _rows_in_workers(texts: Iterable[str], parameters: SketchParameters, workers: int) -> Iterator[np.ndarray]:
    iterator = iter(texts)
    context = multiprocessing.get_context("spawn")  # no fork of whatever threads the caller holds
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending: deque[Future[np.ndarray]] = deque()
        while True:
            while len(pending) < 2 * workers:
                batch = list(islice(iterator, WORKER_BATCH))
                if not batch:
                    break
                pending.append(pool.submit(_batch_rows, batch, parameters))
            if not pending:
                return
            yield pending.popleft().result()


def _rows_here(texts: Iterable[str], parameters: SketchParameters) -> Iterator[np.ndarray]:
    for signed in sketch_signatures(texts, parameters, training=True):
        yield signed.rows


def build_sketch(
    texts: Iterable[str],
    parameters: SketchParameters | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    workers: int = 1,
) -> TrainingSketch:
    """The sketch of ``texts``: the signature of every audited window and statement set, repeats removed, rows sorted.

    Memory stays within a few times the cap: rows are made distinct whenever twice the cap's worth has piled up,
    and the build stops with one line as soon as the distinct rows alone would pass ``max_bytes``."""
    parameters = parameters or SketchParameters()
    limit = _max_rows(max_bytes, parameters.num_perm)
    parts: list[np.ndarray] = []
    held = 0
    batches = _rows_in_workers(texts, parameters, workers) if workers > 1 else _rows_here(texts, parameters)
    for rows in batches:
        parts.append(rows)
        held += len(rows)
        if held > 2 * limit:
            parts = [distinct_sorted(np.concatenate(parts))]
            held = len(parts[0])
            if held > limit:
                break
    rows = distinct_sorted(np.concatenate(parts)) if parts else np.zeros((0, parameters.num_perm), dtype=np.uint16)
    if len(rows) > limit:
        raise UsageError(
            f"the training texts give more than {limit} distinct signatures, over the {max_bytes}-byte cap of the sketch",
            hint="sketch fewer texts, leave out the fine windows of long code (--no-fine-windows), or raise --max-bytes up to the competition's upload cap",
        )
    return TrainingSketch(parameters, rows)
