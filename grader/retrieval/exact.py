"""Compiled kernels of the exact search: float64 re-scoring in a fixed order, and the trec-order cut.

The score of a query ``q`` and a document ``d`` (float32 vectors of dimension
``n``) is :func:`score`: each product ``q[i] * d[i]`` is formed in float64, where
it is exact (24 + 24 significand bits fit in 53), and the products are added
into eight accumulators, ``acc[j] += p[8*m + j]``, which are then combined as
``((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7))`` plus the tail ``n mod 8`` products
added in order. That order is written out in the source; it is compiled without
``fastmath``, so LLVM may not reassociate it (putting the eight independent
accumulators into SIMD lanes, which it may do, performs the same IEEE additions).
A fused multiply-add could not change a bit either: the product it skips
rounding is exact anyway. So the score is a function of the two vectors alone,
bit for bit, on any IEEE-754 CPU and at any thread count.

Numba compiles these on first use (seconds) and caches the machine code on disk
(:mod:`grader.kernel_cache`: the user's cache folder unless
``NUMBA_CACHE_DIR`` says otherwise), so later processes load it. A cached entry is
keyed by this file's contents, the numba version and the CPU, and it was compiled
with the same flags (no ``fastmath``): the same code as a fresh compilation.
"""

from __future__ import annotations

from grader.kernel_cache import configure_numba_cache

#: Whether the kernels are cached on disk; decided before numba reads its configuration.
CACHE = configure_numba_cache()

import numba  # noqa: E402 - after NUMBA_CACHE_DIR is set
import numpy as np  # noqa: E402
from numba import prange  # noqa: E402


def load_cpu_target() -> None:
    """Load numba's CPU target (its typing and lowering registries, and the BLAS check that imports ``scipy.linalg``)
    without loading any kernel, so that processes forked from this one load only the cached kernels themselves.

    A worker forks a child per job, and each child paid for this anew (0.3-0.4 CPU-seconds: a shard job's search took
    about a third longer). Loading a parallel kernel here would start numba's thread pool, after which a fork is
    unsafe; the target alone starts no thread (``tests/test_worker_preload.py``).
    """
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()


# Error-bound constants (docs/search.md). u32, u64: unit roundoffs.
U32 = 2.0**-24
U64 = 2.0**-53


def gamma(n: int, unit: float) -> float:
    """Higham's gamma_n = n u / (1 - n u): bound on the relative error of an n-term dot product in any order."""
    return n * unit / (1.0 - n * unit)


def error_coefficients(dimension: int) -> tuple[float, float]:
    """``(c, eta)`` with ``|faiss_score - score| <= c * |q| * |d| + eta`` for every query/document pair.

    ``c`` is gamma_n for float32 (faiss, any summation order, FMA or not) plus
    gamma_n for float64 (this module's :func:`score`), times a safety factor
    ``1 + 2**-20`` that covers the rounding of the norms and of the threshold
    arithmetic. ``eta`` covers underflow: each of the ``n`` float32 products and
    ``n`` additions may lose up to 2**-126 when the CPU flushes subnormal
    results to zero (inputs are screened to be normal or zero).
    """
    n = max(1, dimension)
    c = (gamma(n, U32) + gamma(n, U64)) * (1.0 + 2.0**-20)
    eta = 2.0 * n * 2.0**-126
    return c, eta


@numba.njit(cache=CACHE, fastmath=False, nogil=True, inline="always")
def score(q: np.ndarray, d: np.ndarray) -> float:  # pragma: no cover - compiled
    """The fixed-order float64 inner product of two float32 vectors (see the module docstring)."""
    n = q.shape[0]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    a4 = 0.0
    a5 = 0.0
    a6 = 0.0
    a7 = 0.0
    m = n - n % 8
    for i in range(0, m, 8):
        a0 += np.float64(q[i]) * np.float64(d[i])
        a1 += np.float64(q[i + 1]) * np.float64(d[i + 1])
        a2 += np.float64(q[i + 2]) * np.float64(d[i + 2])
        a3 += np.float64(q[i + 3]) * np.float64(d[i + 3])
        a4 += np.float64(q[i + 4]) * np.float64(d[i + 4])
        a5 += np.float64(q[i + 5]) * np.float64(d[i + 5])
        a6 += np.float64(q[i + 6]) * np.float64(d[i + 6])
        a7 += np.float64(q[i + 7]) * np.float64(d[i + 7])
    total = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
    for i in range(m, n):
        total += np.float64(q[i]) * np.float64(d[i])
    return total


@numba.njit(cache=CACHE, fastmath=False, nogil=True)
def score_pairs(queries: np.ndarray, corpus: np.ndarray, q_rows: np.ndarray, d_rows: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`score` of each pair ``(queries[q_rows[p]], corpus[d_rows[p]])`` (tests and the benchmark use it)."""
    out = np.empty(len(q_rows), dtype=np.float64)
    for p in range(len(q_rows)):
        out[p] = score(queries[q_rows[p]], corpus[d_rows[p]])
    return out


@numba.njit(cache=CACHE, fastmath=False, nogil=True, parallel=True)
def finish_rows(
    rows: np.ndarray,
    queries: np.ndarray,
    q_norms: np.ndarray,
    fetched_scores: np.ndarray,
    fetched_rows: np.ndarray,
    corpus: np.ndarray,
    representatives: np.ndarray,
    d_norms: np.ndarray,
    max_d_norm: float,
    multiplicity: np.ndarray,
    group_offsets: np.ndarray,
    group_docs: np.ndarray,
    doc_ranks: np.ndarray,
    n_unique: int,
    k: int,
    coefficient: float,
    eta: float,
    out_scores: np.ndarray,
    out_docs: np.ndarray,
    done: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Turn faiss's float32 candidates into each query's exact top ``k`` in trec order.

    For position ``i``, query ``rows[i]`` has ``fetched_rows[i]`` (unique rows,
    ``u`` standing for corpus row ``representatives[u]``; best float32 score first; -1 pads) with ``fetched_scores[i]``. The
    query's first fetched rows whose multiplicities reach ``k`` prove the k-th
    exact score is at least ``floor = min(s_hat - E)`` over them; a row can only
    reach it if ``s_hat + E >= floor`` (E the error bound of that pair). If a row
    not fetched could still reach it (the last fetched one could), ``done[i]``
    stays False and the caller fetches deeper. Otherwise every row in the window
    is re-scored with :func:`score`, and the documents behind them (duplicates
    expanded) are cut at ``k`` by score descending, then doc rank descending.
    Writes ``out_scores[rows[i]]``/``out_docs[rows[i]]`` (-1 pads) and ``done[i]``.
    """
    depth = fetched_rows.shape[1]
    for i in prange(len(rows)):
        row = rows[i]
        qn = q_norms[row]
        valid = _fetched_count(fetched_rows[i])
        floor, reached = _kth_floor(fetched_rows[i], fetched_scores[i], valid, multiplicity, d_norms, qn, coefficient, eta, k)
        if (
            valid == depth
            and depth < n_unique
            and (not reached or np.float64(fetched_scores[i, depth - 1]) + coefficient * qn * max_d_norm + eta >= floor)
        ):
            done[i] = False
            continue
        window = _window(fetched_rows[i], fetched_scores[i], valid, d_norms, qn, coefficient, eta, floor)
        q = queries[row]
        exact = np.empty(len(window), dtype=np.float64)
        for j in range(len(window)):
            exact[j] = score(q, corpus[representatives[window[j]]])
        _cut_at_k(window, exact, k, group_offsets, group_docs, doc_ranks, out_scores[row], out_docs[row])
        done[i] = True


@numba.njit(cache=CACHE, fastmath=False, nogil=True, inline="always")
def _fetched_count(fetched: np.ndarray) -> int:  # pragma: no cover - compiled
    """How many of a query's fetched rows are real (-1 pads the rest)."""
    valid = 0
    while valid < len(fetched) and fetched[valid] >= 0:
        valid += 1
    return valid


@numba.njit(cache=CACHE, fastmath=False, nogil=True, inline="always")
def _kth_floor(
    fetched: np.ndarray,
    fetched_scores: np.ndarray,
    valid: int,
    multiplicity: np.ndarray,
    d_norms: np.ndarray,
    qn: float,
    coefficient: float,
    eta: float,
    k: int,
) -> tuple[float, bool]:  # pragma: no cover - compiled
    """A lower bound of the k-th exact score, and whether the fetched rows reach ``k`` documents (-inf, False if not)."""
    floor = np.inf
    count = 0
    for j in range(valid):
        u = fetched[j]
        floor = min(floor, np.float64(fetched_scores[j]) - (coefficient * qn * d_norms[u] + eta))
        count += multiplicity[u]
        if count >= k:
            return floor, True
    return -np.inf, False


@numba.njit(cache=CACHE, fastmath=False, nogil=True, inline="always")
def _window(
    fetched: np.ndarray, fetched_scores: np.ndarray, valid: int, d_norms: np.ndarray, qn: float, coefficient: float, eta: float, floor: float
) -> np.ndarray:  # pragma: no cover - compiled
    """The fetched rows that may belong to the exact top k: those whose score plus its error bound reaches ``floor``."""
    window = np.empty(valid, dtype=np.int64)
    width = 0
    for j in range(valid):
        u = fetched[j]
        if np.float64(fetched_scores[j]) + coefficient * qn * d_norms[u] + eta >= floor:
            window[width] = u
            width += 1
    return window[:width]


@numba.njit(cache=CACHE, fastmath=False, nogil=True, inline="always")
def _cut_at_k(
    window: np.ndarray,
    exact: np.ndarray,
    k: int,
    group_offsets: np.ndarray,
    group_docs: np.ndarray,
    doc_ranks: np.ndarray,
    out_scores: np.ndarray,
    out_docs: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Write the documents behind ``window`` (duplicates expanded) cut at ``k``: score descending, then doc rank descending."""
    width = len(window)
    # Score descending; rows with equal scores are merged below by doc rank, so the sort need not be stable.
    order = np.argsort(-exact)
    filled = 0
    p = 0
    while p < width and filled < k:
        r = p + 1
        while r < width and exact[order[r]] == exact[order[p]]:
            r += 1
        room = k - filled
        if r == p + 1:  # one group with this score: its members are already in rank order
            u = window[order[p]]
            begin = group_offsets[u]
            take = min(room, group_offsets[u + 1] - begin)
            for t in range(take):
                out_scores[filled + t] = exact[order[p]]
                out_docs[filled + t] = group_docs[begin + t]
            filled += take
        else:  # several distinct vectors tie exactly: merge their documents by rank
            total = 0
            for s in range(p, r):
                u = window[order[s]]
                total += min(room, group_offsets[u + 1] - group_offsets[u])
            members = np.empty(total, dtype=np.int64)
            at = 0
            for s in range(p, r):
                u = window[order[s]]
                begin = group_offsets[u]
                for t in range(min(room, group_offsets[u + 1] - begin)):
                    members[at] = group_docs[begin + t]
                    at += 1
            ranked = members[np.argsort(-doc_ranks[members], kind="mergesort")]
            take = min(room, total)
            for t in range(take):
                out_scores[filled + t] = exact[order[p]]
                out_docs[filled + t] = ranked[t]
            filled += take
        p = r


@numba.njit(cache=CACHE, fastmath=False, nogil=True, parallel=True)
def scan_rows(vectors: np.ndarray, tiny: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """One pass over float32 rows: float64 L2 norms, whether each row is finite, whether it holds -0.0 or a subnormal."""
    n, dimension = vectors.shape
    norms = np.empty(n, dtype=np.float64)
    finite = np.empty(n, dtype=np.bool_)
    odd = np.empty(n, dtype=np.bool_)
    for r in prange(n):
        total = 0.0
        ok = True
        flush = False
        for c in range(dimension):
            x = vectors[r, c]
            if not np.isfinite(x):
                ok = False
            elif x == 0.0:
                if np.signbit(x):
                    flush = True
            elif abs(x) < tiny:
                flush = True
            value = np.float64(x)
            total += value * value
        norms[r] = np.sqrt(total)
        finite[r] = ok
        odd[r] = flush
    return norms, finite, odd


@numba.njit(cache=CACHE, fastmath=False, nogil=True, parallel=True)
def row_hashes(vectors: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """A 64-bit FNV-1a style hash of each row's float32 bit patterns (groups candidate duplicates)."""
    n, dimension = vectors.shape
    bits = vectors.view(np.uint32)
    out = np.empty(n, dtype=np.uint64)
    for r in prange(n):
        h = np.uint64(14695981039346656037)
        for c in range(dimension):
            h = (h ^ np.uint64(bits[r, c])) * np.uint64(1099511628211)
        out[r] = h
    return out


@numba.njit(cache=CACHE, nogil=True)
def group_rows(vectors: np.ndarray, order: np.ndarray, hashes: np.ndarray) -> tuple[np.ndarray, bool]:  # pragma: no cover - compiled
    """Group ids (0, 1, ...) of rows visited in ``order`` (sorted by hash): equal rows share an id, compared bit for bit.

    Returns ``(ids, True)``; ``(ids, False)`` if a run of equal hashes held more than
    8 distinct rows (crafted collisions would make this quadratic; the caller then
    sorts the rows' bytes instead).
    """
    n, dimension = vectors.shape
    bits = vectors.view(np.uint32)
    group = np.full(n, -1, dtype=np.int64)
    next_id = 0
    begin = 0
    while begin < n:
        end = begin + 1
        while end < n and hashes[order[end]] == hashes[order[begin]]:
            end += 1
        distinct = 0
        for a in range(begin, end):  # a run of equal hashes: almost always one row, or copies of one row
            ra = order[a]
            if group[ra] >= 0:
                continue
            distinct += 1
            if distinct > 8:
                return group, False
            group[ra] = next_id
            for b in range(a + 1, end):
                rb = order[b]
                if group[rb] >= 0:
                    continue
                same = True
                for c in range(dimension):
                    if bits[ra, c] != bits[rb, c]:
                        same = False
                        break
                if same:
                    group[rb] = next_id
            next_id += 1
        begin = end
    return group, True
