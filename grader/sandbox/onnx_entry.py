"""Entry point of the grader's runner image: encode a task with an ONNX submission.

Runs inside the sandbox (``encode`` mode of ``docs/protocol.md``): the submission
is mounted read-only at ``/submission``, the task at ``/input``; it writes
``/output/corpus.npy`` and ``/output/queries.npy``. Errors go to stderr as one
line, and the exit status is non-zero: 3 (``RUNNER_MODEL_ERROR_EXIT``) when the
submitted model or tokenizer failed, which the host records as ``MODEL_ERROR``
exactly as an in-process grade does; 2 for anything else.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import numpy as np

from grader import jsonio
from grader.data.task import document_text
from grader.errors import DataError, GraderError, SubmissionError
from grader.failures import RUNNER_MODEL_ERROR_EXIT
from grader.files import atomic_write_bytes
from grader.retrieval.encoder import OnnxEncoder
from grader.submissions.manifest import OnnxManifest, load_manifest

INPUT = Path("/input")
OUTPUT = Path("/output")
SUBMISSION = Path("/submission")


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [record for _, record in jsonio.iter_objects(handle, path=path, error=DataError)]


def _save(name: str, array: np.ndarray) -> None:
    # Atomic (temp file + rename), so a kill mid-write never leaves a plausible partial file.
    buffer = io.BytesIO()
    np.save(buffer, array.astype(np.float32), allow_pickle=False)
    atomic_write_bytes(OUTPUT / name, buffer.getvalue(), mode=0o644)  # the host reads it


def main() -> int:
    """Encode the staged corpus and queries; return the exit status."""
    try:
        manifest = load_manifest(SUBMISSION)
        if not isinstance(manifest, OnnxManifest):
            raise GraderError("the runner image only encodes ONNX submissions")
        threads = int(os.environ.get("GRADER_THREADS", "0")) or (os.cpu_count() or 1)
        encoder = OnnxEncoder.load(SUBMISSION, manifest, threads=threads)
        documents = _read_jsonl(INPUT / "corpus.jsonl")
        queries = _read_jsonl(INPUT / "queries.jsonl")
        texts = [document_text(d.get("title", ""), d["text"]) for d in documents]
        # With the ids, equal texts take a canonical place in the encoding order (docs/search.md).
        corpus, corpus_stats = encoder.encode(texts, ids=[d["_id"] for d in documents], prefix=manifest.document_prefix)
        query_vectors, query_stats = encoder.encode([q["text"] for q in queries], ids=[q["_id"] for q in queries], prefix=manifest.query_prefix)
        _save("corpus.npy", corpus)
        _save("queries.npy", query_vectors)
        stats = {"queries": query_stats.as_dict(), "corpus": corpus_stats.as_dict(), "dimension": encoder.dimension}
        jsonio.write_json(OUTPUT / "encoding.json", stats, indent=None, mode=0o644)
    except SubmissionError as error:
        # The submitted model or tokenizer failed: MODEL_ERROR on the host, as in-process.
        print(f"error: {error}", file=sys.stderr)
        return RUNNER_MODEL_ERROR_EXIT
    except GraderError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
