"""Reading what a container wrote: untrusted, so bounded, link-free and validated first.

Files are opened with ``O_NOFOLLOW`` (a symbolic link is refused, wherever it
points), must be regular files, and must fit their size bound before a byte is
parsed. Runs are schema-validated line by line; embeddings must be float32 .npy
without pickles, with the expected shape, and finite. Grading stops at the first
problem (a :class:`TaskFailure`); :mod:`grader.collect.validate` lists them all.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from grader import jsonio
from grader.errors import RunFormatError, TaskFailure
from grader.failures import FailureCode
from grader.runs.readers import jsonl_run_from_lines
from grader.runs.run import Run

#: Bound on a run.jsonl relative to what a full ranking needs (ids, scores, JSON).
_RUN_BYTES_PER_HIT = 512


@dataclass(frozen=True)
class TaskOutputs:
    """What a task's container returned, read and validated: a run (``retrieve``) or both sides' vectors (``encode``)."""

    run: Run | None
    query_vectors: np.ndarray | None = None
    corpus_vectors: np.ndarray | None = None
    #: the runner image's truncation counts (``encoding.json``), if it wrote well-formed ones
    encoding: dict[str, Any] | None = None


def collect_outputs(folder: Path, *, mode: str, query_ids: Sequence[str], doc_ids: Sequence[str], top_k: int, max_bytes: int) -> TaskOutputs:
    """Read and validate the outputs ``mode`` asks for from ``folder`` (a container's ``/output``), or raise :class:`TaskFailure`.

    ``query_ids`` and ``doc_ids`` are the staged ones, in the order the container was given them;
    ``max_bytes`` is the output cap.
    """
    if mode == "retrieve":
        bound = min(max_bytes, max(1 << 20, len(query_ids) * min(top_k, len(doc_ids)) * _RUN_BYTES_PER_HIT))
        return TaskOutputs(read_run_output(folder, query_ids=query_ids, doc_ids=doc_ids, top_k=top_k, max_bytes=bound))
    if mode == "encode":
        corpus = read_embeddings_output(folder, "corpus.npy", rows=len(doc_ids), max_bytes=max_bytes)
        queries = read_embeddings_output(folder, "queries.npy", rows=len(query_ids), max_bytes=max_bytes, dimension=corpus.shape[1])
        return TaskOutputs(None, queries, corpus, read_encoding_stats(folder))
    raise TaskFailure(FailureCode.IMAGE_INVALID, f"mode {mode!r} is not supported for retrieval tasks")


@contextlib.contextmanager
def open_output(folder: Path, name: str, *, max_bytes: int) -> Iterator[IO[bytes]]:
    """Open ``folder/name`` for reading if it is a regular, non-link file within ``max_bytes``."""
    path = folder / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise TaskFailure(FailureCode.OUTPUT_MISSING, f"/output/{name} was not written") from None
    except OSError as exc:
        if os.path.islink(path):
            raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} is a symbolic link; write a regular file") from None
        raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} cannot be opened: {exc.strerror}") from None
    handle = os.fdopen(fd, "rb")
    try:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} is not a regular file")
        if info.st_size > max_bytes:
            raise TaskFailure(FailureCode.OUTPUT_TOO_LARGE, f"/output/{name} is {info.st_size} bytes, over its {max_bytes}-byte bound")
        yield handle
    finally:
        handle.close()


def read_run_output(folder: Path, *, query_ids: Sequence[str], doc_ids: Sequence[str], top_k: int, max_bytes: int) -> Run:
    """Read and validate ``/output/run.jsonl`` against the staged queries and corpus."""
    with open_output(folder, "run.jsonl", max_bytes=max_bytes) as handle:
        text = io.TextIOWrapper(handle, encoding="utf-8", errors="strict", newline="")
        try:
            return jsonl_run_from_lines(
                text, Path("/output/run.jsonl"), max_hits=top_k, known_queries=frozenset(query_ids), known_docs=frozenset(doc_ids)
            )
        except RunFormatError as error:
            raise TaskFailure(FailureCode.OUTPUT_INVALID, str(error)) from None


def _npy_header(handle: IO[bytes], name: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The ``(shape, fortran_order, dtype)`` of a .npy header; ``OUTPUT_INVALID`` for anything unreadable.

    numpy's header parser can fail in many ways on hostile bytes (``SyntaxError``,
    ``tokenize.TokenError``, ``ValueError``...), so every exception here is the
    output's fault; nothing is allocated from the header's claims before they are checked.
    """
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(handle)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(handle)
        raise ValueError(f".npy format version {version[0]}.{version[1]} (1.0 or 2.0 are read)")
    except Exception as exc:  # hostile bytes: see the docstring
        raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} is not a valid .npy array: {type(exc).__name__}: {exc}") from None


def embedding_blocks(
    folder: Path, name: str, *, rows: int, max_bytes: int, max_dimension: int, block_rows: Callable[[int], int], fault: FailureCode
) -> Iterator[tuple[int, np.ndarray]]:
    """``/output/<name>`` as (first row, block) pairs, read into one reused float32 buffer, never whole.

    The header is checked first (float32 little-endian, C order, shape ``(rows, d)`` with
    ``1 <= d <= max_dimension``, the file exactly as long as it promises): nothing is
    allocated from an unchecked claim. ``block_rows(d)`` sizes the buffer. A block with a
    NaN or an infinity is ``fault`` (the runner image's vectors: the model's fault). Each
    block is valid only until the next one is read.
    """
    with open_output(folder, name, max_bytes=max_bytes) as handle:
        shape, fortran_order, dtype = _npy_header(handle, name)
        if dtype != np.dtype("<f4") or fortran_order:
            raise TaskFailure(
                FailureCode.OUTPUT_INVALID, f"/output/{name} has dtype {dtype} (fortran order {fortran_order}); C-order float32 is required"
            )
        if len(shape) != 2 or shape[0] != rows or not 1 <= shape[1] <= max_dimension:
            raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} has shape {shape}; ({rows}, dim) with dim <= {max_dimension} is required")
        dimension = int(shape[1])
        remaining = os.fstat(handle.fileno()).st_size - handle.tell()
        if remaining != rows * dimension * 4:
            raise TaskFailure(
                FailureCode.OUTPUT_INVALID,
                f"/output/{name} is not a valid .npy array: {remaining} data bytes where its header promises {rows * dimension * 4}",
            )
        buffer = np.empty((max(1, min(rows, block_rows(dimension))), dimension), dtype=np.float32)
        for first in range(0, rows, len(buffer)):
            block = buffer[: min(len(buffer), rows - first)]
            view, filled = block.data.cast("B"), 0
            reader = typing.cast(io.BufferedReader, handle)
            while filled < len(view):
                got = reader.readinto(view[filled:])
                if not got:
                    raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} ended early (row {first})")
                filled += got
            if not np.isfinite(block).all():
                raise TaskFailure(fault, f"/output/{name} contains NaN or infinite values (rows {first} to {first + len(block) - 1})")
            yield first, block


def read_embeddings_output(folder: Path, name: str, *, rows: int, max_bytes: int, dimension: int | None = None) -> np.ndarray:
    """Read ``/output/<name>`` as a float32 (rows, d) matrix of finite values.

    The header is checked (float32, C order, (rows, d), and exactly as many data
    bytes as it promises) before the data is read: no pickles, no allocation
    sized by an unchecked header.
    """
    with open_output(folder, name, max_bytes=max_bytes) as handle:
        shape, fortran_order, dtype = _npy_header(handle, name)
        if dtype != np.float32:
            raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} has dtype {dtype}; float32 is required")
        if len(shape) != 2 or shape[0] != rows or shape[1] == 0:
            raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} has shape {shape}; ({rows}, dim) is required, one row per input line")
        expected = shape[0] * shape[1] * 4
        data = handle.read(expected + 1)
        if len(data) != expected:
            raise TaskFailure(
                FailureCode.OUTPUT_INVALID, f"/output/{name} is not a valid .npy array: {len(data)} data bytes where its header promises {expected}"
            )
        array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran_order else "C")
    if dimension is not None and array.shape[1] != dimension:
        raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} has {array.shape[1]} columns; the other side has {dimension}")
    if not np.all(np.isfinite(array)):
        raise TaskFailure(FailureCode.OUTPUT_INVALID, f"/output/{name} contains NaN or infinite values")
    return np.ascontiguousarray(array, dtype=np.float32)


def read_encoding_stats(folder: Path) -> dict[str, Any] | None:
    """The runner image's truncation counts (``encoding.json``), if present and well-formed.

    Informational only: anything malformed is ignored rather than trusted.
    """
    try:
        with open_output(folder, "encoding.json", max_bytes=64 * 1024) as handle:
            data = jsonio.loads(handle.read(), max_bytes=64 * 1024)
    except (TaskFailure, jsonio.JsonError):
        return None
    if not isinstance(data, dict) or set(data) != {"queries", "corpus", "dimension"} or not isinstance(data["dimension"], int):
        return None
    for side in ("queries", "corpus"):
        stats = data[side]
        if not isinstance(stats, dict) or set(stats) != {"texts", "truncated", "truncated_share"}:
            return None
        texts, truncated = stats["texts"], stats["truncated"]
        if not (isinstance(texts, int) and isinstance(truncated, int) and 0 <= truncated <= texts):
            return None
        stats["truncated_share"] = truncated / texts if texts else 0.0
    return data


#: The files a container may write, by mode (anything else is ignored).
EXPECTED_OUTPUTS = {"retrieve": ("run.jsonl",), "encode": ("queries.npy", "corpus.npy", "encoding.json"), "translate": ("predictions.jsonl",)}


def copy_outputs(folder: Path, dest: Path, mode: str, *, max_bytes: int) -> list[str]:
    """Copy the expected output files of ``mode`` to ``dest`` (same safety rules); return the names copied.

    Missing, linked, special or oversized files are skipped: validation reports them.
    """
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in EXPECTED_OUTPUTS.get(mode, ()):
        try:
            with open_output(folder, name, max_bytes=max_bytes) as source, open(dest / name, "wb") as target:
                for chunk in iter(lambda: source.read(1 << 20), b""):
                    target.write(chunk)
        except TaskFailure:
            continue
        copied.append(name)
    return copied
