"""C2SP ``tlog-checkpoint``: a log's signed tree head as the text of a signed note.

The text is the origin line, the tree size in decimal (no leading zero but for ``0``), the base64
root hash, and optional non-empty extension lines, each ending in a newline. A log signs it with
its note key, whose name should be the origin.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from grader.errors import UsageError
from grader.text import quote_id
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import EMPTY_ROOT, HASH_SIZE, verify_consistency
from grader.transparency.note import NoteSigner, NoteVerifier, decode_base64, open_note, sign_note

_SIZE = re.compile(r"0|[1-9][0-9]{0,19}")
#: Largest tree size a checkpoint may state: sizes are uint64 in every implementation.
MAX_TREE_SIZE = (1 << 64) - 1


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: ``origin``, ``size`` leaves, ``root_hash``, and opaque ``extensions`` lines."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin or not self.origin.isprintable():
            raise UsageError("a checkpoint's origin is one non-empty printable line")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise UsageError(f"tree size {self.size} is out of range")
        if len(self.root_hash) != HASH_SIZE:
            raise UsageError(f"a root hash has {HASH_SIZE} bytes, not {len(self.root_hash)}")
        for line in self.extensions:
            if not line or "\n" in line or not line.isprintable():
                raise UsageError("a checkpoint's extension line is one non-empty printable line")

    def text(self) -> str:
        """The note text of this checkpoint."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root_hash).decode("ascii"), *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """Read a checkpoint from its note text; :class:`LogVerificationError` if malformed."""
        if not text.endswith("\n"):
            raise LogVerificationError("the checkpoint's text does not end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise LogVerificationError("a checkpoint has an origin, a tree size and a root hash line")
        origin, size_line, root_line, *extensions = lines
        if not origin:
            raise LogVerificationError("the checkpoint's origin line is empty")
        if not _SIZE.fullmatch(size_line) or int(size_line) > MAX_TREE_SIZE:
            raise LogVerificationError(f"the checkpoint's tree size {quote_id(size_line)} is not a decimal number without leading zeros")
        root = decode_base64(root_line, "the checkpoint's root hash")
        # Canonical base64 only: one root hash must have one spelling in a signed text.
        if len(root) != HASH_SIZE or base64.b64encode(root).decode("ascii") != root_line:
            raise LogVerificationError(f"the checkpoint's root hash is not the base64 of {HASH_SIZE} bytes")
        if any(not line for line in extensions):
            raise LogVerificationError("the checkpoint has an empty extension line")
        try:
            return cls(origin, int(size_line), root, tuple(extensions))
        except UsageError as error:
            raise LogVerificationError(str(error)) from None


def sign_checkpoint(checkpoint: Checkpoint, signer: NoteSigner, *cosigners: NoteSigner) -> bytes:
    """The signed note of ``checkpoint``, signed by the log's key (and any others)."""
    return sign_note(checkpoint.text(), [signer, *cosigners])


def open_checkpoint(note: bytes, verifiers: Iterable[NoteVerifier], *, origin: str | None = None) -> Checkpoint:
    """The checkpoint in a signed note, once a trusted key's signature verified and (with ``origin``)
    the origin line is the expected one; :class:`LogVerificationError` otherwise."""
    opened = open_note(note, verifiers)
    checkpoint = Checkpoint.parse(opened.text)
    if origin is not None and checkpoint.origin != origin:
        raise LogVerificationError(f"the checkpoint is from log {quote_id(checkpoint.origin)}, not {quote_id(origin)}")
    return checkpoint


def check_extends(seen: Checkpoint | None, new: Checkpoint, proof: Sequence[bytes]) -> None:
    """Raise :class:`LogVerificationError` unless ``new`` extends the checkpoint a client ``seen`` last.

    The client's side of the consistency rules: nothing seen yet (``None``) or the empty tree accepts
    any new checkpoint without a proof; the same size needs the same root (and no proof); a
    smaller size, another origin, or a proof that does not lead from the old root to the new
    one is a fork, and the two signed checkpoints are the evidence.
    """
    if seen is None:
        return
    if seen.origin != new.origin:
        raise LogVerificationError(f"the checkpoints are of two logs: {quote_id(seen.origin)} and {quote_id(new.origin)}")
    if seen.size == 0:
        if seen.root_hash != EMPTY_ROOT:
            raise LogVerificationError("the checkpoint seen of the empty tree has a root other than the empty tree's")
        return
    if new.size < seen.size:
        raise LogVerificationError(f"the log went back from {seen.size} entries to {new.size}")
    if new.size == seen.size:
        if proof or new.root_hash != seen.root_hash:
            raise LogVerificationError(f"two different trees of {new.size} entries: the log forked")
        return
    verify_consistency(seen.size, new.size, proof, seen.root_hash, new.root_hash)
