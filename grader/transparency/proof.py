"""C2SP ``tlog-proof``: an offline-verifiable proof that an entry is in a log (a ``.tlog-proof`` file).

::

    c2sp.org/tlog-proof@v1
    extra <base64 opaque data>        (optional)
    index <decimal entry index>
    <base64 hash>                      (the inclusion proof, leaf side first; zero or more lines)

    <the signed checkpoint, verbatim>

The ``extra`` data is not authenticated: a verifier must never trust it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass

from grader.errors import UsageError
from grader.transparency.checkpoint import MAX_TREE_SIZE, Checkpoint, open_checkpoint
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import HASH_SIZE, verify_inclusion
from grader.transparency.note import MAX_NOTE_BYTES, NoteVerifier, decode_base64

#: The first line of every proof.
HEADER = "c2sp.org/tlog-proof@v1"
#: File name extension the specification recommends.
SUFFIX = ".tlog-proof"
#: Most inclusion-proof lines (a tree of 2**64 leaves needs 64) and largest file accepted.
MAX_PROOF_HASHES = 64
MAX_PROOF_BYTES = MAX_NOTE_BYTES + 64 * 1024
_INDEX = re.compile(r"index (0|[1-9][0-9]{0,19})")


@dataclass(frozen=True)
class TlogProof:
    """An entry's ``index``, its inclusion proof ``hashes``, the signed ``checkpoint`` note, and optional ``extra``."""

    index: int
    hashes: tuple[bytes, ...]
    checkpoint: bytes
    extra: bytes | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.index <= MAX_TREE_SIZE:
            raise UsageError(f"entry index {self.index} is out of range")
        if len(self.hashes) > MAX_PROOF_HASHES or any(len(hashed) != HASH_SIZE for hashed in self.hashes):
            raise UsageError(f"an inclusion proof is at most {MAX_PROOF_HASHES} hashes of {HASH_SIZE} bytes")

    def to_bytes(self) -> bytes:
        """The proof file's bytes."""
        lines = [HEADER]
        if self.extra is not None:
            lines.append(f"extra {base64.b64encode(self.extra).decode('ascii')}")
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(hashed).decode("ascii") for hashed in self.hashes)
        return ("\n".join(lines) + "\n\n").encode("ascii") + self.checkpoint

    @classmethod
    def parse(cls, data: bytes) -> TlogProof:
        """Read a proof file; :class:`LogVerificationError` if it is malformed (no signature is checked here)."""
        if len(data) > MAX_PROOF_BYTES:
            raise LogVerificationError(f"the proof is larger than {MAX_PROOF_BYTES} bytes")
        head, blank, checkpoint = data.partition(b"\n\n")
        if not blank:
            raise LogVerificationError("the proof has no blank line before its checkpoint")
        try:
            lines = head.decode("ascii").split("\n")
        except UnicodeDecodeError:
            raise LogVerificationError("the proof's header lines are not ASCII") from None
        if lines[0] != HEADER:
            raise LogVerificationError(f"the proof does not start with {HEADER}")
        position = 1
        extra = None
        if position < len(lines) and lines[position].startswith("extra "):
            extra = decode_base64(lines[position][len("extra ") :], "the proof's extra line")
            position += 1
        match = _INDEX.fullmatch(lines[position]) if position < len(lines) else None
        if match is None or int(match.group(1)) > MAX_TREE_SIZE:
            raise LogVerificationError(f"line {position + 1} of the proof is not 'index <decimal without leading zeros>'")
        hash_lines = lines[position + 1 :]
        if len(hash_lines) > MAX_PROOF_HASHES:
            raise LogVerificationError(f"the proof has more than {MAX_PROOF_HASHES} hashes")
        hashes = []
        for number, line in enumerate(hash_lines, start=position + 2):
            hashed = decode_base64(line, f"line {number} of the proof")
            if len(hashed) != HASH_SIZE:
                raise LogVerificationError(f"line {number} of the proof is not a {HASH_SIZE}-byte hash")
            hashes.append(hashed)
        return cls(int(match.group(1)), tuple(hashes), checkpoint, extra)

    def verify(self, leaf: bytes, verifiers: Iterable[NoteVerifier], *, origin: str | None = None) -> Checkpoint:
        """Check that leaf hash ``leaf`` is entry :attr:`index` of the log whose checkpoint a trusted key
        signed; returns that checkpoint. :class:`LogVerificationError` otherwise."""
        checkpoint = open_checkpoint(self.checkpoint, verifiers, origin=origin)
        verify_inclusion(self.index, checkpoint.size, leaf, self.hashes, checkpoint.root_hash)
        return checkpoint
