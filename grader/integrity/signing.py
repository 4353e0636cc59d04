"""Signing and verifying a lint report: an in-toto Statement v1 in a DSSE envelope, as grading reports are.

The statement's predicate type is :data:`PREDICATE_TYPE` (not a grading report's), so neither kind of
signed document can be taken for the other.
"""

from __future__ import annotations

from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grader.errors import VerificationError
from grader.reports.dsse import b64decode, envelope_json, pae, parse_envelope, parse_json, quote_untrusted, sign_payload
from grader.reports.keys import keyid
from grader.reports.statement import PAYLOAD_TYPE, STATEMENT_TYPE, canonical_bytes
from grader.schemas import first_error, json_pointer

PREDICATE_TYPE = "https://grader.dev/lint-report/v1"


def lint_statement(report: dict[str, Any]) -> dict[str, Any]:
    """The in-toto statement whose predicate is the lint report and whose subject is the linted data."""
    subject = report["subject"]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject["name"], "digest": dict(subject["digest"])}],
        "predicateType": PREDICATE_TYPE,
        "predicate": report,
    }


def sign_lint_report(report: dict[str, Any], private_key: Ed25519PrivateKey) -> bytes:
    """The envelope file's bytes; checked with the public half before they are returned."""
    envelope = sign_payload(PAYLOAD_TYPE, canonical_bytes(lint_statement(report)), private_key, keyid(private_key.public_key()))
    data = envelope_json(envelope)
    verify_lint_envelope(data, private_key.public_key())
    return data


def verify_lint_envelope(data: bytes, public_key: Ed25519PublicKey) -> dict[str, Any]:
    """The lint report inside a signed envelope, after checking its signature, statement, schema and subject."""
    fields = parse_envelope(data)
    if fields.payload_type != PAYLOAD_TYPE:
        raise VerificationError(f"wrong payload type {quote_untrusted(fields.payload_type)}; expected {PAYLOAD_TYPE}")
    payload = b64decode(fields.payload_b64, what="payload")
    expected = keyid(public_key)
    good = False
    for kid, signature in fields.signatures:
        if kid == expected:
            try:
                public_key.verify(b64decode(signature, what="signature"), pae(fields.payload_type, payload))
                good = True
                break
            except InvalidSignature:
                continue
    if not good:
        raise VerificationError(f"no valid signature by key {expected}")
    statement = parse_json(payload, what="payload")
    if canonical_bytes(statement) != payload:
        raise VerificationError("payload is not RFC 8785 canonical JSON")
    if not isinstance(statement, dict) or statement.get("predicateType") != PREDICATE_TYPE or statement.get("_type") != STATEMENT_TYPE:
        raise VerificationError(f"not an in-toto statement of a lint report ({PREDICATE_TYPE})")
    report = statement.get("predicate")
    if not isinstance(report, dict):
        raise VerificationError("statement predicate must be an object")
    error = first_error("lint", report)
    if error is not None:
        raise VerificationError(f"schema violation at {json_pointer(error)}")
    if statement.get("subject") != lint_statement(report)["subject"]:
        raise VerificationError("subject mismatch: statement subject is not the report's subject")
    return report
