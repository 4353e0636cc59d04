"""A run in memory: the ranked documents of every query, as flat arrays.

Layout is CSR: query ``i`` owns entries ``offsets[i]:offsets[i+1]``; each entry is a
document code (an index into ``doc_vocab``) and a float64 score. A :class:`Run` is
valid once it exists: scores are finite, no document appears twice for a query,
and entries are stored in trec_eval order (score descending, document id
descending), so scoring never sorts again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from grader.data.ids import FORBIDDEN_ID_CHARACTERS, id_problem
from grader.runs.ordering import byte_order_ranks, first_repeat, order_in_place, segment_of


@dataclass(frozen=True)
class RunProblem:
    """Where a run is invalid: the query (and document) concerned."""

    what: str
    query_id: str
    doc_id: str | None = None
    field: str = "score"


class InvalidRun(Exception):
    """Raised by :meth:`Run.build` so readers can attach file and line before re-raising."""

    def __init__(self, problem: RunProblem) -> None:
        super().__init__(problem.what)
        self.problem = problem


@dataclass(frozen=True, eq=False)
class Run:
    """Validated, trec-ordered rankings. Build with :meth:`build` or :meth:`from_mapping`."""

    query_ids: tuple[str, ...]
    offsets: np.ndarray
    doc_codes: np.ndarray
    doc_vocab: tuple[str, ...]
    scores: np.ndarray

    @classmethod
    def build(
        cls,
        query_ids: Sequence[str],
        offsets: np.ndarray,
        doc_codes: np.ndarray,
        doc_vocab: Sequence[str],
        scores: np.ndarray,
        *,
        doc_ranks: np.ndarray | None = None,
        doc_ids_checked: bool = False,
        in_place: bool = False,
    ) -> Run:
        """Validate arrays and store them in trec_eval order.

        Raises :class:`InvalidRun` (for readers to locate) on a non-finite score,
        a document twice in one ranking, or a malformed identifier. A reader that
        has already computed the byte-order ranks of ``doc_vocab``, or checked its
        ids, passes them to skip that work. With ``in_place``, the caller hands
        ``doc_codes`` and ``scores`` over: when their dtypes already match
        (``int32`` codes below 2**31 vocabulary entries, ``float64`` scores) they
        are reordered in place instead of copied, and may be left half-ordered if
        the run is invalid.
        """
        query_ids = tuple(query_ids)
        doc_vocab = tuple(doc_vocab)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        # int32 codes halve the largest array of a big run; ids beyond 2**31 need int64.
        code_dtype = np.int32 if len(doc_vocab) <= np.iinfo(np.int32).max else np.int64
        doc_codes = np.ascontiguousarray(doc_codes, dtype=code_dtype) if in_place else np.array(doc_codes, dtype=code_dtype, order="C")
        scores = np.ascontiguousarray(scores, dtype=np.float64) if in_place else np.array(scores, dtype=np.float64, order="C")
        if len(offsets) != len(query_ids) + 1 or offsets[0] != 0 or offsets[-1] != len(doc_codes):
            raise ValueError("offsets do not describe the entries")
        if len(doc_codes) != len(scores) or np.any(np.diff(offsets) < 0):
            raise ValueError("offsets, codes and scores disagree")
        if len(doc_codes) and (doc_codes.min() < 0 or doc_codes.max() >= len(doc_vocab)):
            raise ValueError("document code out of range")
        if len(set(query_ids)) != len(query_ids):
            seen: set[str] = set()
            duplicate = next(q for q in query_ids if q in seen or seen.add(q))  # type: ignore[func-returns-value]
            raise InvalidRun(RunProblem("query appears twice", duplicate, field="query_id"))
        bad = _first_invalid_id(query_ids)
        if bad is not None:
            raise InvalidRun(RunProblem(str(id_problem(query_ids[bad])), str(query_ids[bad]), field="query_id"))
        if not np.isfinite(scores).all():
            entry = int(np.flatnonzero(~np.isfinite(scores))[0])
            query = query_ids[segment_of(offsets, entry)]
            raise InvalidRun(RunProblem(f"score must be a finite number, got {scores[entry]!r}", query, doc_vocab[doc_codes[entry]]))
        bad = None if doc_ids_checked else _first_invalid_id(doc_vocab)
        if bad is not None:
            entry = int(np.flatnonzero(doc_codes == bad)[0])
            doc_id = doc_vocab[bad]
            raise InvalidRun(RunProblem(str(id_problem(doc_id)), query_ids[segment_of(offsets, entry)], doc_id, field="doc_id"))
        if doc_ranks is None:
            doc_ranks = byte_order_ranks(doc_vocab)
        order_in_place(offsets, doc_codes, scores, doc_ranks)
        _check_unique_documents(offsets, doc_codes, query_ids, doc_vocab)
        run = cls(query_ids, offsets, doc_codes, doc_vocab, scores)
        run.__dict__["doc_ranks"] = doc_ranks
        return run

    @classmethod
    def from_mapping(cls, rankings: Mapping[str, Mapping[str, float]]) -> Run:
        """Build from ``{query_id: {doc_id: score}}`` (the shape BEIR and pytrec_eval use)."""
        vocab: dict[str, int] = {}
        codes: list[int] = []
        scores: list[float] = []
        offsets = [0]
        for docs in rankings.values():
            for doc_id, score in docs.items():
                codes.append(vocab.setdefault(doc_id, len(vocab)))
                scores.append(score)
            offsets.append(len(codes))
        return cls.build(
            list(rankings), np.asarray(offsets), np.asarray(codes, dtype=np.int64), list(vocab), np.asarray(scores, dtype=np.float64), in_place=True
        )

    @cached_property
    def doc_ranks(self) -> np.ndarray:
        """Byte-order rank of each vocabulary entry."""
        return byte_order_ranks(self.doc_vocab)

    @cached_property
    def query_index(self) -> dict[str, int]:
        """Query id -> position."""
        return {query_id: i for i, query_id in enumerate(self.query_ids)}

    @property
    def n_entries(self) -> int:
        return len(self.doc_codes)

    def ranking(self, query_id: str) -> list[tuple[str, float]]:
        """The ranked ``(doc_id, score)`` list of one query, in trec_eval order."""
        i = self.query_index[query_id]
        start, end = self.offsets[i], self.offsets[i + 1]
        return [(self.doc_vocab[c], float(s)) for c, s in zip(self.doc_codes[start:end], self.scores[start:end])]

    def to_mapping(self) -> dict[str, dict[str, float]]:
        """``{query_id: {doc_id: score}}``, in trec order."""
        return {query_id: dict(self.ranking(query_id)) for query_id in self.query_ids}


def _first_invalid_id(ids: tuple[str, ...]) -> int | None:
    """Position of the first id that :func:`id_problem` rejects, or ``None``.

    The common case (all valid) is checked in C-speed passes over the tuple and
    one joined string; only an invalid id costs a Python loop, to find it.
    """
    if not ids:
        return None
    if set(map(type, ids)) == {str} and min(map(len, ids)) > 0:
        joined = "".join(ids)
        if not any(character in joined for character in FORBIDDEN_ID_CHARACTERS):
            return None
    return next((i for i, value in enumerate(ids) if id_problem(value)), None)


def _check_unique_documents(offsets: np.ndarray, doc_codes: np.ndarray, query_ids: tuple[str, ...], doc_vocab: tuple[str, ...]) -> None:
    """Raise :class:`InvalidRun` for the first query (then smallest code) with a document twice."""
    repeat = first_repeat(offsets, doc_codes)
    if repeat is not None:
        segment, code = repeat
        raise InvalidRun(
            RunProblem(f"document {doc_vocab[code]!r} appears twice in the ranking", query_ids[segment], doc_vocab[code], field="doc_id")
        )
