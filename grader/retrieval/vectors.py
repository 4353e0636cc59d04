"""Screening of embedding vectors before they are searched.

Every vector a submission produces (an encoder in-process, the runner image, an
``encode``-mode image) passes here before search. A vector is refused when it
holds a NaN or an infinity, or when its L2 norm exceeds :data:`MAX_NORM`: with
both sides at most 1e15, every inner product and every partial sum of one is at
most 1e30 in magnitude, far from float32's overflow (3.4e38), so neither faiss's
float32 scores nor the exact float64 re-scoring can overflow.

Screened vectors are also made canonical: ``-0.0`` becomes ``+0.0`` (so equal
vectors have equal bytes and are recognised as duplicates) and float32 subnormals
(magnitude below 2**-126) become ``+0.0`` (a CPU running with denormals-are-zero
would read them as zero anyway; flushing them first makes the score the same on
every CPU). See ``docs/search.md``.
"""

from __future__ import annotations

import numpy as np

#: Largest accepted L2 norm of a vector (query or document).
MAX_NORM = 1e15

_SMALLEST_NORMAL = np.float32(np.finfo(np.float32).tiny)  # 2**-126


def vector_problem(vectors: np.ndarray) -> str | None:
    """Why ``vectors`` (rows) cannot be searched, or ``None``: non-finite values or a norm above :data:`MAX_NORM`."""
    if vectors.ndim != 2:
        return f"embeddings must be a matrix, not shape {vectors.shape}"
    if vectors.shape[1] == 0 and vectors.shape[0] > 0:
        return "embeddings have zero width"
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        return f"row {row} contains NaN or infinite values"
    norms = row_norms(vectors)
    if len(norms) and norms.max() > MAX_NORM:
        row = int(np.argmax(norms))
        return f"row {row} has L2 norm {norms[row]:.3g}, above the limit of {MAX_NORM:.0e}"
    return None


def row_norms(vectors: np.ndarray) -> np.ndarray:
    """L2 norms of the rows, computed in float64 in chunks (no overflow, bounded temporaries)."""
    out = np.empty(len(vectors), dtype=np.float64)
    step = max(1, (1 << 22) // max(1, vectors.shape[1]))
    for begin in range(0, len(vectors), step):
        block = vectors[begin : begin + step].astype(np.float64)
        out[begin : begin + step] = np.sqrt(np.einsum("ij,ij->i", block, block))
    return out


def canonical_float32(vectors: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 copy with ``-0.0`` and subnormals replaced by ``+0.0``."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    out[np.abs(out) < _SMALLEST_NORMAL] = 0.0  # also turns -0.0 into +0.0
    return out
