"""Entry point of the grader's runner image: encode a task with an ONNX submission.

Runs inside the sandbox (``encode`` mode of ``docs/protocol.md``): the submission
is mounted read-only at ``/submission``, the task at ``/input``; it writes
``/output/corpus.npy`` and ``/output/queries.npy``. Errors go to stderr as one
line, and the exit status is non-zero: 3 (``RUNNER_MODEL_ERROR_EXIT``) when the
submitted model or tokenizer failed, which the host records as ``MODEL_ERROR``
exactly as an in-process grade does; 2 for anything else.

``task.json`` may carry ``"encode": "queries"`` or ``"documents"`` (a shard job,
docs/scale.md): then only that side is encoded and only its file written. The corpus
is encoded one encoding chunk of its canonical (text, id) order at a time and each
chunk's rows written into ``corpus.npy`` as they come (a memory-mapped ``.npy``), so
the container holds one chunk of vectors, not the corpus's: the batches, hence the
bits, are those of encoding it whole.

While the corpus is encoded, ``/output/progress.json`` says how many documents are done
(``{"encoded": N}``, at most every :data:`PROGRESS_EVERY_S` and once at the end, replaced
atomically): the host shows ``encoding N of M documents`` (:mod:`grader.sandbox.progress_file`).
It is never a result.
"""

from __future__ import annotations

import errno
import io
import os
import sys
import time
from pathlib import Path

import numpy as np

from grader import jsonio
from grader.data.task import document_text
from grader.errors import DataError, GraderError, SubmissionError
from grader.failures import RUNNER_MODEL_ERROR_EXIT
from grader.files import atomic_write_bytes
from grader.retrieval.encoder import EncodingStats, OnnxEncoder
from grader.retrieval.shards import canonical_order
from grader.sandbox.progress_file import PROGRESS_FILE
from grader.submissions.manifest import OnnxManifest, load_manifest

#: 128 + SIGXFSZ: the exit status of a write stopped by the output cap (grader.sandbox.task_run reads it as OUTPUT_TOO_LARGE).
OUTPUT_FULL_EXIT = 153
INPUT = Path("/input")
OUTPUT = Path("/output")
SUBMISSION = Path("/submission")
#: The least time between two writes of ``/output/progress.json`` (the host looks about once a second).
PROGRESS_EVERY_S = 1.0


class _ProgressWriter:
    """Counts encoded documents; writes ``/output/progress.json`` at most every :data:`PROGRESS_EVERY_S`, and on :meth:`write`.

    Best effort: a write that fails (a full ``/output``) ends the writing, never the encoding.
    """

    def __init__(self) -> None:
        self.encoded = 0
        self.written = time.monotonic()
        self.failed = False

    def __call__(self, count: int) -> None:
        self.encoded += count
        if time.monotonic() - self.written >= PROGRESS_EVERY_S:
            self.write()

    def write(self) -> None:
        self.written = time.monotonic()
        if self.failed:
            return
        try:
            # Atomic (temp file + rename inside /output): the host never reads half a file.
            jsonio.write_json(OUTPUT / PROGRESS_FILE, {"encoded": self.encoded}, indent=None, mode=0o644)
        except OSError:
            self.failed = True


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [record for _, record in jsonio.iter_objects(handle, path=path, error=DataError)]


def _save(name: str, array: np.ndarray) -> None:
    # Atomic (temp file + rename), so a kill mid-write never leaves a plausible partial file.
    buffer = io.BytesIO()
    np.save(buffer, array.astype(np.float32), allow_pickle=False)
    atomic_write_bytes(OUTPUT / name, buffer.getvalue(), mode=0o644)  # the host reads it


def _encode_corpus(encoder: OnnxEncoder, prefix: str) -> EncodingStats:
    """Encode ``corpus.jsonl`` chunk by chunk into ``corpus.npy`` (row i: the staged file's line i); the counts.

    Written under a temporary name and renamed when complete, so a kill mid-write never leaves a plausible partial file.
    """
    documents = _read_jsonl(INPUT / "corpus.jsonl")
    texts = [document_text(d.get("title", ""), d["text"]) for d in documents]
    ids = [d["_id"] for d in documents]
    del documents
    # With the ids, equal texts take a canonical place in the encoding order (docs/search.md).
    order = canonical_order(texts, ids)
    chunk = encoder.batching.chunk_size
    partial = OUTPUT / ".corpus.npy.partial"
    rows = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(len(texts), encoder.dimension))
    # Claim the file's blocks now: past the output cap this fails here (ENOSPC, or SIGXFSZ under the fsize ulimit),
    # not as a SIGBUS on a page of the mapping mid-encoding.
    descriptor = os.open(partial, os.O_RDWR)
    try:
        os.posix_fallocate(descriptor, 0, os.fstat(descriptor).st_size)
    finally:
        os.close(descriptor)
    truncated = 0
    progress = _ProgressWriter()
    for start in range(0, len(order), chunk):
        # One whole chunk in canonical order: encode() forms the batches the whole corpus forms here.
        picked = order[start : start + chunk]
        vectors, stats = encoder.encode([texts[r] for r in picked.tolist()], ids=[ids[r] for r in picked.tolist()], prefix=prefix, progress=progress)
        rows[picked] = vectors.astype(np.float32)
        truncated += stats.truncated
    rows.flush()
    del rows
    os.chmod(partial, 0o644)  # the host reads it
    os.replace(partial, OUTPUT / "corpus.npy")
    progress.write()
    return EncodingStats(len(texts), truncated)


def main() -> int:
    """Encode the staged corpus and queries (or the one side ``task.json``'s ``encode`` names); return the exit status."""
    try:
        manifest = load_manifest(SUBMISSION)
        if not isinstance(manifest, OnnxManifest):
            raise GraderError("the runner image only encodes ONNX submissions")
        side = jsonio.load_file(INPUT / "task.json").get("encode")
        if side not in (None, "queries", "documents"):
            raise GraderError(f"task.json: encode must be 'queries' or 'documents', not {side!r}")
        threads = int(os.environ.get("GRADER_THREADS", "0")) or (os.cpu_count() or 1)
        encoder = OnnxEncoder.load(SUBMISSION, manifest, threads=threads)
        stats: dict[str, object] = {"dimension": encoder.dimension}
        if side != "documents":
            queries = _read_jsonl(INPUT / "queries.jsonl")
            query_vectors, query_stats = encoder.encode([q["text"] for q in queries], ids=[q["_id"] for q in queries], prefix=manifest.query_prefix)
            _save("queries.npy", query_vectors)
            stats["queries"] = query_stats.as_dict()
        if side != "queries":
            stats["corpus"] = _encode_corpus(encoder, manifest.document_prefix).as_dict()
        jsonio.write_json(OUTPUT / "encoding.json", stats, indent=None, mode=0o644)
    except SubmissionError as error:
        # The submitted model or tokenizer failed: MODEL_ERROR on the host, as in-process.
        print(f"error: {error}", file=sys.stderr)
        return RUNNER_MODEL_ERROR_EXIT
    except GraderError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise
        # /output is full: the status the fsize ulimit's SIGXFSZ gives, which the host reads as OUTPUT_TOO_LARGE.
        print(f"error: the output exceeds its cap ({error.strerror})", file=sys.stderr)
        return OUTPUT_FULL_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
