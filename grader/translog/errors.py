"""Errors of the transparency log (part of the one hierarchy rooted at :class:`~grader.errors.GraderError`)."""

from __future__ import annotations

from grader.errors import VerificationError


class LogVerificationError(VerificationError):
    """A Merkle proof, checkpoint, signed note, tile or ``tlog-proof`` file is malformed or does not verify.

    It is a :class:`~grader.errors.VerificationError`: ``grader verify`` exits 1 on it. The message
    says which check failed; it quotes hashes and sizes, never key material.
    """
