"""A task's documents under a competition's blinding key, kept on disk for the server's scoring processes.

Scoring a hosted grade maps the worker's run back from pseudonyms to real ids (:func:`grader.grading.scoring.real_run`),
which needs every document id of the task and its pseudonym: the whole corpus read and parsed, every id hashed under the
key, the pseudonyms sorted. At 300k documents that was 3.2 s of each grade's serial tail (2.3 s reading the corpus,
0.8 s blinding), and it grows with the corpus (CoIR's 2.39 M documents: tens of seconds a grade). It depends only on
the corpus and the key, so it is computed once and kept (:func:`blinded_documents`), for every later grade, on every
scoring process and across restarts.

What is kept is read back from disk, so it is used only when it proves its writer: the file carries an HMAC-SHA256 of
its whole content under a key derived from the competition's blinding secret (which only the grader holds), and it
names the task, the corpus file's sha256 (computed by the reader from the corpus as it is now) and the key id. Any
other file (changed, truncated, another key's, another corpus's, a link, larger than its bound) is ignored and the
documents are blinded afresh, then kept again. The file holds what the state's key file already gives away (each
id's pseudonym), so it is written as privately (0600, the state folder's umask).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import logging
from pathlib import Path

import numpy as np

from grader import jsonio
from grader.data.task import Task
from grader.files import atomic_write_bytes, read_bounded
from grader.sandbox.blinding import DOCUMENT, PSEUDONYM_HEX, BlindedIds, BlindingKey, blind

log = logging.getLogger(__name__)

#: Names the file's layout; a file of another version is ignored (and replaced).
FORMAT = "grader-blinded-documents/1"
_MAC_DOMAIN = b"grader blinded documents v1\x00"
#: A kept file may be this much larger than its corpus file, plus :data:`SLACK_BYTES` (ids and pseudonyms are far
#: smaller than the documents they name; the bound only keeps a damaged or planted file from being read whole).
RATIO = 4
SLACK_BYTES = 64 << 20
_PSEUDONYM_BYTES = 1 + PSEUDONYM_HEX


def blinded_documents(task: Task, key: BlindingKey, folder: Path | None) -> BlindedIds:
    """``blind(key, task.name, DOCUMENT, ids)`` of the task's corpus ids in file order; from ``folder``'s kept copy
    when one proves its writer, else computed and kept there (``folder`` None: computed, nothing kept)."""
    meta = _meta(task, key)
    path = None if folder is None else folder / _file_name(meta)
    if path is not None:
        kept = _read(path, meta, key, limit=RATIO * task.corpus_path.stat().st_size + SLACK_BYTES)
        if kept is not None:
            return kept
    documents = blind(key, task.name, DOCUMENT, [document.id for document in task.iter_corpus()])
    if path is not None:
        _write(path, meta, key, documents)
    return documents


def keep_blinded_documents(task: Task, key: BlindingKey, folder: Path, documents: BlindedIds) -> None:
    """Keep ``documents`` (``task``'s corpus ids blinded under ``key``, as :func:`blinded_documents` returns them) in
    ``folder``: what the export of the workers' copy, which blinds them anyway, leaves for scoring."""
    meta = _meta(task, key)
    _write(folder / _file_name(meta), meta, key, documents)


def _meta(task: Task, key: BlindingKey) -> dict[str, str]:
    """What a kept file names: its layout, the task, the corpus file's sha256 as it is now, the key's id."""
    corpus_sha256 = task.file_digests[task.corpus_path.relative_to(task.root).as_posix()]
    return {"format": FORMAT, "task": task.name, "corpus_sha256": corpus_sha256, "key_id": key.key_id}


def _file_name(meta: dict[str, str]) -> str:
    """One file per (task, corpus, key): a digest, so that no task name reaches the file system."""
    return hashlib.sha256(jsonio.dumps(meta, sort_keys=True).encode("utf-8")).hexdigest() + ".blinded"


def _mac(key: BlindingKey, content: bytes) -> bytes:
    mac_key = hmac.digest(key.secret, _MAC_DOMAIN, "sha256")  # a key of its own: the pseudonyms' key never MACs files
    return hmac.digest(mac_key, content, "sha256")


def _write(path: Path, meta: dict[str, str], key: BlindingKey, documents: BlindedIds) -> None:
    """Keep ``documents`` at ``path``: ``MAC (hex) \\n meta (JSON) \\n arrays (npz)``, atomically, 0600."""
    real = [identifier.encode("utf-8", "surrogatepass") for identifier in documents.real]
    offsets = np.zeros(len(real) + 1, dtype=np.int64)
    np.cumsum([len(identifier) for identifier in real], out=offsets[1:])
    arrays = io.BytesIO()
    np.savez(
        arrays,
        staged=np.array(documents.staged, dtype=f"S{_PSEUDONYM_BYTES}"),
        real_bytes=np.frombuffer(b"".join(real), dtype=np.uint8),
        real_offsets=offsets,
        rows=np.asarray(documents.rows, dtype=np.int64),
    )
    content = jsonio.dumps(meta, sort_keys=True).encode("utf-8") + b"\n" + arrays.getvalue()
    try:
        atomic_write_bytes(path, _mac(key, content).hex().encode("ascii") + b"\n" + content, mode=0o600)
    except OSError as error:  # a full or read-only disk costs the next grade the blinding again, never this one
        log.warning("could not keep the blinded documents of task %s (%s): %s", meta["task"], path, error)


def _read(path: Path, meta: dict[str, str], key: BlindingKey, *, limit: int) -> BlindedIds | None:
    """The documents kept at ``path`` if its MAC holds and it names ``meta``; None otherwise (absent, damaged, foreign)."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = read_bounded(path, limit, OSError, what="kept blinded documents", follow_links=False)
    except OSError as error:
        log.warning("ignored the kept blinded documents of task %s: %s", meta["task"], error)
        return None
    mac_hex, _, content = data.partition(b"\n")
    if not hmac.compare_digest(mac_hex, _mac(key, content).hex().encode("ascii")):
        log.warning("ignored the kept blinded documents of task %s: not written by this grader under this key", meta["task"])
        return None
    # The MAC holds: these are bytes this grader wrote under this key. What follows checks they name this corpus.
    header, _, body = content.partition(b"\n")
    if jsonio.loads(header) != meta:
        return None
    with np.load(io.BytesIO(body), allow_pickle=False) as arrays:
        staged_bytes, real_bytes = arrays["staged"], arrays["real_bytes"].tobytes()
        offsets, rows = arrays["real_offsets"], arrays["rows"]
    staged = tuple(staged_bytes.astype(f"U{_PSEUDONYM_BYTES}").tolist())
    bounds = offsets.tolist()
    real = tuple(real_bytes[bounds[i] : bounds[i + 1]].decode("utf-8", "surrogatepass") for i in range(len(bounds) - 1))
    return BlindedIds(staged, real, np.ascontiguousarray(rows, dtype=np.int64))
