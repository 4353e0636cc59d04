"""The sidecar of a worker copy's corpus: its canonical encoding order, so a shard job reads only its shard.

A worker copy's ``<task>/corpus.jsonl`` lists the documents sorted by pseudonym id, so a
document's line number is its byte-order rank (its index in a compact run). The server's
export writes next to it ``corpus.order``: for each position of the canonical (text, id)
order (:func:`grader.retrieval.shards.canonical_order`), the document's line number, the
byte offset and length of its line, and an 8-byte BLAKE2b digest of the line. A shard job
then reads its slice of this file and seeks to just its lines: its memory grows with the
shard, not with the corpus. The file's sha256 and count are in the copy's manifest
(``worker-data.json``, key ``orders``), so what a shard job reads is verified end to end:
the sidecar against the manifest, each line against the sidecar.

Layout (little-endian): a 24-byte header, magic ``GRDORDER``, version (u32), zero (u32),
count (u64); then ``count`` entries of 24 bytes: line (u32), length (u32), offset (u64),
digest (8 bytes).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np

from grader.errors import TaskFailure
from grader.failures import FailureCode

#: The sidecar's name, in the task folder of a worker copy.
FILE = "corpus.order"
#: The worker copy's manifest (written by :mod:`grader.hosting.protocol.worker_data`), one folder above the task's.
COPY_MANIFEST = "worker-data.json"
MAGIC = b"GRDORDER"
VERSION = 1
HEADER = struct.Struct("<8sIIQ")
ENTRY = np.dtype([("line", "<u4"), ("length", "<u4"), ("offset", "<u8"), ("digest", "V8")])
#: The buffer a digest is streamed through (fixed: reading a large sidecar never holds it whole).
BUFFER = 1 << 16


def line_digest(line: bytes) -> bytes:
    """The 8-byte digest the sidecar keeps of one corpus line (its bytes, newline included)."""
    return hashlib.blake2b(line, digest_size=8).digest()


def write_order(path: Path, order: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, digests: list[bytes]) -> str:
    """Write the sidecar of ``order`` (line numbers in canonical order) over lines at ``offsets``; its sha256.

    ``offsets``, ``lengths`` and ``digests`` are per line number.
    """
    entries = np.empty(len(order), dtype=ENTRY)
    entries["line"] = order
    entries["offset"] = offsets[order]
    entries["length"] = lengths[order]
    entries["digest"] = np.frombuffer(b"".join(digests), dtype="V8")[order] if digests else np.empty(0, dtype="V8")
    data = HEADER.pack(MAGIC, VERSION, 0, len(order)) + entries.tobytes()
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def damaged(path: Path, problem: str) -> TaskFailure:
    """The platform's fault (``INFRA``): a worker copy's file is not what the server exported."""
    return TaskFailure(
        FailureCode.INFRA,
        f"{path}: {problem}: this worker's data copy is damaged",
        hint="re-export the worker data (`grader admin export-worker-data`) or let the worker fetch it afresh",
    )


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``, streamed through a fixed buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(BUFFER)
    view = memoryview(buffer)
    with open(path, "rb") as handle:
        while read := handle.readinto(buffer):
            digest.update(view[:read])
    return digest.hexdigest()


def read_count(path: Path) -> int:
    """The number of entries the sidecar's header declares; INFRA when the header or the size is wrong."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(HEADER.size)
            size = path.stat().st_size
    except OSError as exc:
        raise damaged(path, f"unreadable ({exc.strerror})") from None
    if len(header) < HEADER.size:
        raise damaged(path, "truncated header")
    magic, version, zero, count = HEADER.unpack(header)
    if magic != MAGIC or version != VERSION or zero != 0:
        raise damaged(path, f"not a corpus order file of version {VERSION}")
    if size != HEADER.size + count * ENTRY.itemsize:
        raise damaged(path, f"{size} bytes, but its header declares {count} entries")
    return int(count)


def read_entries(path: Path, begin: int, end: int) -> np.ndarray:
    """Entries ``begin:end`` of the sidecar (canonical positions), read alone."""
    with open(path, "rb") as handle:
        handle.seek(HEADER.size + begin * ENTRY.itemsize)
        data = handle.read((end - begin) * ENTRY.itemsize)
    if len(data) != (end - begin) * ENTRY.itemsize:
        raise damaged(path, f"entries {begin}:{end} are cut short")
    return np.frombuffer(data, dtype=ENTRY)


def read_lines(corpus: Path, entries: np.ndarray) -> list[bytes]:
    """The corpus lines ``entries`` name (in the entries' order), each checked against its digest; read in file order."""
    lines: list[bytes] = [b""] * len(entries)
    with open(corpus, "rb") as handle:
        for index in np.argsort(entries["offset"], kind="stable").tolist():
            entry = entries[index]
            handle.seek(int(entry["offset"]))
            line = handle.read(int(entry["length"]))
            if len(line) != int(entry["length"]) or not line.endswith(b"\n") or line_digest(line) != entry["digest"].tobytes():
                raise damaged(corpus, f"line {int(entry['line']) + 1} is not the line the corpus order recorded")
            lines[index] = line
    return lines
