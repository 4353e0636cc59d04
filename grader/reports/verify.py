"""Verifying a signed report: every check, in a fixed order, before anything is trusted."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from grader.errors import VerificationError
from grader.files import read_bounded
from grader.reports.dsse import b64decode, pae, parse_envelope, parse_json, quote_untrusted
from grader.reports.keys import keyid
from grader.reports.model import schema_violation
from grader.reports.statement import PAYLOAD_TYPE, parse_statement, statement_subject

#: Largest envelope file read; real reports are a few kilobytes.
MAX_ENVELOPE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class VerifiedReport:
    """A report whose signature, statement and schema all checked out."""

    report: dict[str, Any]
    statement: dict[str, Any]
    #: hex sha256 of the raw public key that signed it
    keyid: str


def _check_signature(payload_type: str, payload: bytes, signatures: list[tuple[str, bytes]], public_key: Ed25519PublicKey) -> str:
    """Check the signatures made with ``public_key``'s keyid; return that keyid."""
    expected = keyid(public_key)
    matching = [signature for kid, signature in signatures if kid == expected]
    if not matching:
        found = ", ".join(quote_untrusted(kid) for kid, _ in signatures[:3])
        raise VerificationError(f"key mismatch: envelope keyid {found} is not the key's keyid {expected!r}")
    message = pae(payload_type, payload)
    for signature in matching:
        try:
            public_key.verify(signature, message)
            return expected
        except InvalidSignature:
            continue
    raise VerificationError("bad signature")


def verify_envelope(envelope_bytes: bytes, public_key: Ed25519PublicKey, *, source: str | None = None) -> VerifiedReport:
    """Verify a DSSE envelope holding a signed report and return the verified report.

    Checks, in order: valid JSON, envelope shape, payload type, base64, keyid,
    Ed25519 signature over PAE, canonical in-toto Statement v1 with our predicate
    type, report schema, statement subject == report subject. Raises
    :class:`VerificationError` naming the first failed check, prefixed by
    ``source`` (the file name) when given.
    """
    try:
        return _verify(envelope_bytes, public_key)
    except VerificationError as error:
        if source is None:
            raise
        raise VerificationError(f"{source}: {error}") from None


def _signed_payload(envelope_bytes: bytes, public_key: Ed25519PublicKey) -> tuple[bytes, str]:
    """The payload of an in-toto envelope whose signature by ``public_key`` checked out, and the signer's keyid."""
    fields = parse_envelope(envelope_bytes)
    if fields.payload_type != PAYLOAD_TYPE:
        raise VerificationError(f"wrong payload type {quote_untrusted(fields.payload_type)}; expected {PAYLOAD_TYPE}")
    payload = b64decode(fields.payload_b64, what="payload")
    signatures = [(kid, b64decode(sig, what="signature")) for kid, sig in fields.signatures]
    return payload, _check_signature(fields.payload_type, payload, signatures, public_key)


def signed_predicate_type(envelope_bytes: bytes, public_key: Ed25519PublicKey, *, source: str | None = None) -> str | None:
    """The predicate type of a signed statement, read only once its signature by ``public_key`` checked out.

    ``grader verify`` dispatches on it (a grading report or a lint report); nothing else of the
    payload is trusted here, and the verifier of that kind checks everything again. Errors are the
    same, in the same order, as :func:`verify_envelope`'s, prefixed by ``source`` when given.
    """
    try:
        payload, _ = _signed_payload(envelope_bytes, public_key)
        statement = parse_json(payload, what="payload")
    except VerificationError as error:
        if source is None:
            raise
        raise VerificationError(f"{source}: {error}") from None
    kind = statement.get("predicateType") if isinstance(statement, dict) else None
    return kind if isinstance(kind, str) else None


def _verify(envelope_bytes: bytes, public_key: Ed25519PublicKey) -> VerifiedReport:
    payload, signer = _signed_payload(envelope_bytes, public_key)
    # Only from here on is the payload authentic; before, nothing of it was interpreted.
    statement = parse_statement(payload)
    report = statement["predicate"]
    violation = schema_violation(report)
    if violation is not None:
        raise VerificationError(f"schema violation at {violation}")
    if statement["subject"][0] != statement_subject(report):
        raise VerificationError("subject mismatch: statement subject is not the report's subject name and digest")
    return VerifiedReport(report=report, statement=statement, keyid=signer)


def read_envelope_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of an envelope file, or :class:`VerificationError` ``unreadable file: ...``."""
    where = os.fspath(path)
    return read_bounded(path, MAX_ENVELOPE_BYTES, lambda reason: VerificationError(f"{where}: unreadable file: {reason}"), what="envelope")


def verify_report_file(path: str | os.PathLike[str], public_key: Ed25519PublicKey) -> VerifiedReport:
    """Read and verify the envelope file at ``path`` (errors are prefixed with the path)."""
    return verify_envelope(read_envelope_file(path), public_key, source=os.fspath(path))
