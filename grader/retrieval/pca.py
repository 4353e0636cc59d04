"""PCA dimension reduction of embeddings, as the CAT paper grades at 20 and 768 dimensions.

PCA is fitted on the stacked queries and candidates of the graded split (as the
paper does), with a full, deterministic SVD: components are the right singular
vectors of the centred matrix, each sign fixed so its largest-magnitude entry is
positive (SVD signs are otherwise arbitrary). It applies only when the native
dimension is larger than the target; vectors are L2-normalised after projection,
so search scores are cosine similarities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.retrieval.encoder import l2_normalize


@dataclass(frozen=True)
class Projection:
    """The result of reducing queries and corpus to one dimension."""

    dimension: int
    applied: bool
    explained_variance: float
    queries: np.ndarray
    corpus: np.ndarray


def fit_components(stacked: np.ndarray, dimension: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, the top ``dimension`` components (rows) and their share of the variance."""
    data = stacked.astype(np.float64)
    mean = data.mean(axis=0)
    _, singular, vt = np.linalg.svd(data - mean, full_matrices=False)
    components = vt[:dimension]
    signs = np.sign(components[np.arange(len(components)), np.argmax(np.abs(components), axis=1)])
    signs[signs == 0] = 1.0
    components = components * signs[:, None]
    variance = singular**2
    explained = float(variance[:dimension].sum() / variance.sum()) if variance.sum() > 0 else 1.0
    return mean, components, explained


def reduce(queries: np.ndarray, corpus: np.ndarray, dimension: int) -> Projection:
    """Project both sides to ``dimension`` (if smaller than native) and L2-normalise.

    The stacked rows are fitted and projected in a canonical order (sorted by
    their bytes), so the result does not depend on the order of the queries or
    the corpus (docs/search.md).
    """
    native = queries.shape[1]
    if dimension >= native:
        return Projection(dimension, False, 1.0, l2_normalize(queries), l2_normalize(corpus))
    stacked = np.ascontiguousarray(np.vstack([queries, corpus]), dtype=np.float32)
    order = np.argsort(stacked.view(np.dtype((np.void, stacked.itemsize * native))).ravel(), kind="stable")
    ordered = stacked[order]
    mean, components, explained = fit_components(ordered, dimension)
    projected = np.empty((len(stacked), dimension), dtype=np.float32)
    projected[order] = l2_normalize((ordered.astype(np.float64) - mean) @ components.T).astype(np.float32)
    return Projection(dimension, True, explained, projected[: len(queries)], projected[len(queries) :])


def parse_dimensions(value: str | None) -> tuple[int, ...]:
    """``"20,768"`` -> (20, 768): positive integers, first occurrence kept; empty -> () (native only)."""
    from grader.errors import UsageError

    if not value:
        return ()
    dims: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"--pca-dims: {part!r} is not a positive integer")
        if int(part) not in dims:
            dims.append(int(part))
    return tuple(dims)
