"""Build a training sketch from texts (``grader sketch-training``), bounded by the file's cap as it goes."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from grader.errors import UsageError
from grader.integrity.sketch_file import DEFAULT_MAX_BYTES, TrainingSketch, distinct_sorted, encoded_size
from grader.integrity.sketch_text import SketchParameters, sketch_signatures


def _max_rows(max_bytes: int, num_perm: int) -> int:
    return max(0, (max_bytes - encoded_size(0, num_perm)) // (2 * num_perm))


def build_sketch(
    texts: Iterable[str],
    parameters: SketchParameters | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: Callable[[int], None] | None = None,
) -> TrainingSketch:
    """The sketch of ``texts``: every audited window's signature, repeats removed, rows sorted.

    ``progress`` is called with the number of texts done after each batch. Memory stays within a few times the
    cap: rows are made distinct whenever twice the cap's worth has piled up, and the build stops with one line as
    soon as the distinct rows alone would pass ``max_bytes``."""
    parameters = parameters or SketchParameters()
    limit = _max_rows(max_bytes, parameters.num_perm)
    parts: list[np.ndarray] = []
    held = 0
    done = 0
    for rows, owners in sketch_signatures(texts, parameters):
        parts.append(rows)
        held += len(rows)
        if progress is not None:
            progress(int(owners[-1]) + 1 - done)
            done = int(owners[-1]) + 1
        if held > 2 * limit:
            parts = [distinct_sorted(np.concatenate(parts))]
            held = len(parts[0])
            if held > limit:
                break
    rows = distinct_sorted(np.concatenate(parts)) if parts else np.zeros((0, parameters.num_perm), dtype=np.uint16)
    if len(rows) > limit:
        raise UsageError(
            f"the training texts give more than {limit} distinct windows, over the {max_bytes}-byte cap of the sketch",
            hint="sketch fewer texts, or raise --max-bytes up to the competition's upload cap",
        )
    return TrainingSketch(parameters, rows)
