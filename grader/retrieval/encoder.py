"""Encoding texts with a submitted ONNX encoder and its Hugging Face tokenizer.

Texts are visited in a canonical order (sorted by the text, then the id), tokenised in chunks,
sorted by token count inside a chunk, and cut into batches under a token budget,
so padding stays small and the batches are a function of the set of (text, id)
pairs, not of their order (docs/search.md); vectors go back to input order. With several
threads, that many batches run at once, one thread each (see :class:`BatchPolicy`).
The manifest's ``max_length`` overrides whatever truncation or padding the
tokenizer file carries (exported files often disagree with the model). With the
same model and texts the output is bit-for-bit repeatable, in any order of the
texts; with the default concurrent batches, at any thread count too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from grader.errors import SubmissionError
from grader.retrieval.shards import canonical_order
from grader.retrieval.vectors import vector_problem
from grader.submissions.manifest import OnnxManifest
from grader.submissions.onnx_intake import OnnxModelInfo, inspect_onnx_model

Progress = Callable[[int], None]

_NUMPY_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


@dataclass(frozen=True)
class EncodingStats:
    """How many texts were encoded and how many had to be truncated."""

    texts: int
    truncated: int
    #: tokens fed to the model (after truncation): a cost figure only, never in the report's ``encoding``
    tokens: int = field(default=0, compare=False)

    @property
    def truncated_share(self) -> float:
        return self.truncated / self.texts if self.texts else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"texts": self.texts, "truncated": self.truncated, "truncated_share": self.truncated_share}


@dataclass(frozen=True)
class BatchPolicy:
    """How texts are grouped for the model.

    ``max_batch_tokens`` bounds rows x longest row of a batch. Small batches keep
    the model's intermediate tensors in cache: on CPU (all-MiniLM-L6-v2, one
    thread), throughput is flat from about 256 to 1,024 padded tokens a batch and
    falls off above (16,384: about 40% fewer texts/s); see ``bench/encode.py``.
    """

    max_batch_tokens: int = 1024
    max_batch_size: int = 256
    chunk_size: int = 8192
    #: Sort texts by token count inside a chunk (less padding). ``False`` keeps
    #: input order, so each batch is a run of consecutive texts (benchmarks use it).
    sort_by_length: bool = True
    #: With ``threads`` > 1, run that many batches at once, each on one thread
    #: (onnxruntime gets one intra-op thread; ``session.run`` releases the GIL).
    #: Inside one batch, a transformer's element-wise and attention ops barely
    #: gain from a second thread on long texts; whole batches scale almost
    #: linearly. ``False``: one batch at a time, split over ``threads`` threads.
    #: Either way a batch's vectors depend only on the batch, so output is repeatable.
    #: Peak activation memory grows with the batches in flight (attention scores
    #: take up to max_batch_tokens x max_length x heads x 4 bytes a batch).
    concurrent_batches: bool = True


class OnnxEncoder:
    """A loaded, checked ONNX encoder. Construct with :meth:`load`."""

    def __init__(
        self,
        manifest: OnnxManifest,
        session: ort.InferenceSession,
        tokenizer: Tokenizer,
        info: OnnxModelInfo,
        batching: BatchPolicy,
        *,
        workers: int = 1,
    ) -> None:
        self.manifest = manifest
        self.session = session
        self.tokenizer = tokenizer
        self.info = info
        self.batching = batching
        self.workers = max(1, workers)  # batches run at once (threads calling session.run)
        self._input_types = {i.name: _NUMPY_TYPES.get(i.type) for i in session.get_inputs()}
        for name, dtype in self._input_types.items():
            if dtype is None:
                raise SubmissionError(f"model input {name!r} must be int64 or int32", path=manifest.model, field="inputs")
        self.dimension = self._probe_dimension()

    @classmethod
    def load(cls, folder: Path, manifest: OnnxManifest, *, threads: int, batching: BatchPolicy = BatchPolicy()) -> OnnxEncoder:
        """Check the model (:func:`inspect_onnx_model`), then load it and the tokenizer."""
        info = inspect_onnx_model(folder, manifest)
        tokenizer = load_tokenizer(folder / manifest.tokenizer, manifest.max_length)
        workers = threads if batching.concurrent_batches and threads > 1 else 1
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1 if workers > 1 else threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(folder / manifest.model), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise SubmissionError(f"onnxruntime cannot load the model: {_one_line(exc)}", path=folder / manifest.model) from None
        return cls(manifest, session, tokenizer, info, batching, workers=workers)

    def _probe_dimension(self) -> int:
        """Run one short text through the model: the output width is the dimension."""
        encoding = self.tokenizer.encode("def probe(): return 1")
        n = len(encoding.ids)
        # Values are screened per task (a MODEL_ERROR of that task), not here: only the shape matters now.
        vectors, _ = self._run_batch([encoding.ids], [[1] * n], [encoding.type_ids], screen=False)
        return int(vectors.shape[1])

    def encode(
        self, texts: Sequence[str], *, ids: Sequence[str] | None = None, prefix: str = "", progress: Progress | None = None
    ) -> tuple[np.ndarray, EncodingStats]:
        """Embed ``texts`` (each prefixed) into a float32 matrix, one row per text, in input order.

        Texts are visited in a canonical order (sorted by the text, equal texts by
        their ``ids``: :func:`grader.retrieval.shards.canonical_order`), so the
        batches, and with them every vector, are a function of the set of
        (text, id) pairs, not of their order: a model's output for a text may
        depend, in its last bits, on the other texts of its batch and on the
        padding. Texts already in canonical order, encoded a whole number of
        chunks at a time, get the same vectors as in one call (shards). A text that
        tokenises to no tokens at all is not run through the model; its vector is
        zero (mean pooling over no tokens, as sentence-transformers defines it).
        """
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        truncated = tokens = 0
        chunk = self.batching.chunk_size
        canonical = canonical_order(texts, ids) if self.batching.sort_by_length else np.arange(len(texts))
        executor = ThreadPoolExecutor(self.workers, thread_name_prefix="grader-encode") if self.workers > 1 and len(texts) else None
        try:
            for start in range(0, len(texts), chunk):
                rows = canonical[start : start + chunk]
                batch_texts = [prefix + texts[row] for row in rows]
                encodings = self.tokenizer.encode_batch(batch_texts)
                truncated += sum(1 for encoding in encodings if encoding.overflowing)
                token_ids = [encoding.ids for encoding in encodings]
                type_ids = [encoding.type_ids for encoding in encodings]
                lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=len(token_ids))
                tokens += int(lengths.sum())
                # Stable sort by length: equal lengths keep the canonical order, so batches are canonical too.
                order = np.argsort(lengths, kind="stable") if self.batching.sort_by_length else np.arange(len(lengths))
                empty = order[lengths[order] == 0]
                out[rows[empty]] = 0.0
                if progress is not None and len(empty):
                    progress(len(empty))
                batches = self._batches(order[lengths[order] > 0], lengths)

                def embed(indices: np.ndarray) -> np.ndarray:
                    # Used only within this iteration (the pending futures are all collected below).
                    return self._run_batch(*_pad(indices, lengths, token_ids, type_ids))[0]  # noqa: B023

                # Results are taken in batch order, so errors and progress come in a fixed order too.
                pending = None if executor is None else [executor.submit(embed, indices) for indices in batches]
                for number, indices in enumerate(batches):
                    out[rows[indices]] = embed(indices) if pending is None else pending[number].result()
                    if progress is not None:
                        progress(len(indices))
        finally:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
        return out, EncodingStats(len(texts), truncated, tokens)

    def _batches(self, order: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """Cut ``order`` into runs whose padded size (rows x longest row) fits the token budget."""
        batches: list[np.ndarray] = []
        begin = 0
        budget, cap = self.batching.max_batch_tokens, self.batching.max_batch_size
        while begin < len(order):
            end = begin + 1
            longest = max(int(lengths[order[begin]]), 1)
            while end < len(order) and end - begin < cap and (end - begin + 1) * max(longest, int(lengths[order[end]])) <= budget:
                longest = max(longest, int(lengths[order[end]]))
                end += 1
            batches.append(order[begin:end])
            begin = end
        return batches

    def _run_batch(self, ids: object, mask: object, types: object, *, screen: bool = True) -> tuple[np.ndarray, np.ndarray]:
        ids_array = np.asarray(ids, dtype=np.int64)
        mask_array = np.asarray(mask, dtype=np.int64)
        feeds = {}
        for name, dtype in self._input_types.items():
            source = {"input_ids": ids_array, "attention_mask": mask_array, "token_type_ids": np.asarray(types, dtype=np.int64)}[name]
            feeds[name] = source.astype(dtype, copy=False)
        try:
            (hidden,) = self.session.run([self.manifest.output], feeds)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise SubmissionError(f"the model failed on a batch of shape {ids_array.shape}: {_one_line(exc)}", path=self.manifest.model) from None
        hidden = np.asarray(hidden)
        vectors = pool(hidden, mask_array, self.manifest.pooling)
        if vectors.ndim != 2 or vectors.shape[0] != ids_array.shape[0] or vectors.shape[1] == 0:
            raise SubmissionError(
                f"output {self.manifest.output!r} has shape {hidden.shape}, which does not fit pooling {self.manifest.pooling!r}",
                path=self.manifest.model,
                field="output",
            )
        if hasattr(self, "dimension") and vectors.shape[1] != self.dimension:
            raise SubmissionError(
                f"output {self.manifest.output!r} has shape {hidden.shape}: {vectors.shape[1]} dimensions, not {self.dimension} as on the first batch",
                path=self.manifest.model,
                field="output",
            )
        if screen and not np.all(np.isfinite(vectors)):
            raise SubmissionError("the model produced NaN or infinite values", path=self.manifest.model, field="output")
        if self.manifest.normalize:
            vectors = l2_normalize(vectors)
        vectors = vectors.astype(np.float32, copy=False)
        problem = vector_problem(vectors) if screen else None
        if problem is not None:  # e.g. finite values so large that inner products would overflow
            raise SubmissionError(f"the model's vectors cannot be searched: {problem}", path=self.manifest.model, field="output")
        return vectors, mask_array


def _pad(
    indices: np.ndarray, lengths: np.ndarray, token_ids: list[list[int]], type_ids: list[list[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-pad the rows ``indices`` with zeros to the longest of them: (ids, mask, types), int64."""
    rows = lengths[indices]
    filled = np.arange(int(rows.max()) if len(rows) else 0) < rows[:, None]
    total = int(rows.sum())
    ids = np.zeros(filled.shape, dtype=np.int64)
    types = np.zeros(filled.shape, dtype=np.int64)
    # Boolean assignment fills row by row, left to right: the rows' tokens concatenated in order.
    ids[filled] = np.fromiter(chain.from_iterable(token_ids[i] for i in indices), dtype=np.int64, count=total)
    types[filled] = np.fromiter(chain.from_iterable(type_ids[i] for i in indices), dtype=np.int64, count=total)
    return ids, filled.astype(np.int64), types


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """Pool token vectors (batch, tokens, dim) into one vector per text.

    ``mean`` averages over real tokens (as sentence-transformers does, with the
    count clamped at 1e-9); ``cls`` takes the first token; ``none`` expects the
    model to have pooled already (batch, dim).
    """
    if pooling == "none":
        return hidden
    if hidden.ndim != 3:
        return hidden[:0]  # caller reports the shape mismatch
    if pooling == "cls":
        if hidden.shape[1] == 0:
            return np.zeros((0, hidden.shape[2]), dtype=hidden.dtype)  # no token to take: the caller reports the shape
        return hidden[:, 0, :]
    weights = mask[:, : hidden.shape[1], None].astype(hidden.dtype)
    summed = (hidden * weights).sum(axis=1)
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    return summed / counts


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (clamped at 1e-12, as torch's ``normalize``)."""
    with np.errstate(over="ignore"):
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out = vectors / np.maximum(norms, 1e-12)
    overflowed = ~np.isfinite(norms[:, 0]) & np.isfinite(vectors).all(axis=1)
    if overflowed.any():  # finite rows too large to square in their own precision: divide in float64
        wide = vectors[overflowed].astype(np.float64)
        out[overflowed] = wide / np.linalg.norm(wide, axis=1, keepdims=True)
    return out


def load_tokenizer(path: Path, max_length: int) -> Tokenizer:
    """Load a ``tokenizer.json``; truncate at ``max_length`` and never pad (we pad per batch)."""
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a plain Exception on bad files
        raise SubmissionError(f"not a loadable tokenizer.json: {_one_line(exc)}", path=path) from None
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")
