"""Errors of the transparency log (part of the one hierarchy rooted at :class:`~grader.errors.GraderError`)."""

from __future__ import annotations

from grader.errors import VerificationError


class LogVerificationError(VerificationError):
    """A Merkle proof, checkpoint, signed note, tile or ``tlog-proof`` file is malformed or does not verify.

    It is a :class:`~grader.errors.VerificationError`: ``grader verify`` exits 1 on it. The message
    says which check failed; it quotes hashes and sizes, never key material.
    """


class InconsistentCheckpoints(LogVerificationError):
    """Two checkpoints a log signed cannot both be true: its history was rewritten, cut or forked.

    ``seen`` and ``new`` are the two signed notes, verbatim: portable evidence that anyone can check
    with the log's key.
    """

    def __init__(self, message: str, *, seen: bytes, new: bytes) -> None:
        super().__init__(message)
        self.seen = seen
        self.new = new


class LogTooLarge(LogVerificationError):
    """A log larger than an audit reads (its claimed entries, or the bytes of its entries): refused before it is read whole."""
