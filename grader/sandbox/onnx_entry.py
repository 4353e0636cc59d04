"""Entry point of the grader's runner image: encode a task with an ONNX submission.

Runs inside the sandbox (``encode`` mode of ``docs/protocol.md``): the submission
is mounted read-only at ``/submission``, the task at ``/input``; it writes
``/output/corpus.npy`` and ``/output/queries.npy``. Errors go to stderr as one
line, and the exit status is non-zero.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from grader.errors import GraderError
from grader.retrieval.encoder import OnnxEncoder
from grader.submissions.manifest import OnnxManifest, load_manifest

INPUT = Path("/input")
OUTPUT = Path("/output")
SUBMISSION = Path("/submission")


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _save(name: str, array: np.ndarray) -> None:
    # Write then rename, so a kill mid-write never leaves a plausible partial file.
    temporary = OUTPUT / f".{name}.partial"
    with open(temporary, "wb") as handle:
        np.save(handle, array.astype(np.float32), allow_pickle=False)
    os.replace(temporary, OUTPUT / name)


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
        texts = [(d.get("title", "") + " " + d["text"]).strip() for d in documents]
        corpus, corpus_stats = encoder.encode(texts, prefix=manifest.document_prefix)
        query_vectors, query_stats = encoder.encode([q["text"] for q in queries], prefix=manifest.query_prefix)
        _save("corpus.npy", corpus)
        _save("queries.npy", query_vectors)
        stats = {"queries": query_stats.as_dict(), "corpus": corpus_stats.as_dict(), "dimension": encoder.dimension}
        with open(OUTPUT / "encoding.json", "w", encoding="utf-8") as handle:
            json.dump(stats, handle)
    except GraderError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
