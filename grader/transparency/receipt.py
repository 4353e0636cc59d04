"""The receipt file ``grader submit --receipt FILE`` writes, and reading it back for ``grader log verify-proof --entry FILE``.

The upload's answer carries its receipt: the logged entry (text), its entry key, index, leaf hash and
proof. ``FILE`` keeps all but the proof, as JSON; ``FILE.tlog-proof`` keeps the proof. Both the
writer and the reader live here so that ``verify-proof`` accepts the file exactly as it was written;
the entry's own bytes (a file holding just the entry) are accepted too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader import jsonio
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import leaf_hash

#: What the receipt file keeps of the upload's receipt (the proof goes beside it).
RECEIPT_FIELDS = ("index", "entry", "entry_key", "leaf_hash")


def receipt_files(receipt: Mapping[str, Any]) -> tuple[bytes, bytes | None]:
    """The receipt file's bytes (every field but ``proof``, as indented JSON) and the proof's (None without one)."""
    kept = {key: value for key, value in receipt.items() if key != "proof"}
    proof = receipt.get("proof")
    return jsonio.dumps(kept, indent=2).encode("utf-8") + b"\n", proof.encode("utf-8") if isinstance(proof, str) else None


@dataclass(frozen=True)
class LoggedEntry:
    """An entry's bytes as a file gave them, and the index a receipt file says it has (None for a bare entry)."""

    entry: bytes
    index: int | None = None


def entry_from_file(data: bytes, where: str) -> LoggedEntry:
    """The logged entry in ``data``: a receipt file (its ``entry``, checked against its ``leaf_hash``) or the entry itself.

    A receipt file is a JSON object with an ``entry`` text and no ``kind`` (every entry has a kind);
    anything else is taken as the entry's bytes, which the caller decodes and checks.
    """
    try:
        value = jsonio.loads(data)
    except jsonio.JsonError:
        return LoggedEntry(data)  # not JSON: the entry's decoder says what is wrong with it
    if not isinstance(value, dict) or "kind" in value or "entry" not in value:
        return LoggedEntry(data)
    entry, index, hashed = value["entry"], value.get("index"), value.get("leaf_hash")
    if not isinstance(entry, str) or (index is not None and (type(index) is not int or index < 0)):
        raise LogVerificationError(f"{where}: a receipt file whose entry is not text or whose index is not a count")
    entry_bytes = entry.encode("utf-8")
    if hashed is not None and hashed != leaf_hash(entry_bytes).hex():
        raise LogVerificationError(f"{where}: the receipt's leaf_hash is not the hash of its entry")
    return LoggedEntry(entry_bytes, index)
