"""The in-toto Statement v1 that wraps a report, and its canonical (RFC 8785) bytes."""

from __future__ import annotations

from typing import Any

import rfc8785

from grader.errors import ReportError, VerificationError
from grader.reports.dsse import parse_json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://grader.dev/grading-report/v1"
#: DSSE payloadType of an in-toto statement.
PAYLOAD_TYPE = "application/vnd.in-toto+json"


def statement_subject(report: dict) -> dict[str, Any]:
    """The in-toto subject naming what a report grades: the report subject's name and digest."""
    subject = report["subject"]
    return {"name": subject["name"], "digest": dict(subject["digest"])}


def make_statement(report: dict) -> dict[str, Any]:
    """The in-toto Statement v1 whose predicate is ``report``."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [statement_subject(report)],
        "predicateType": PREDICATE_TYPE,
        "predicate": report,
    }


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical JSON of ``value``: the exact bytes that get signed."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as error:
        raise ReportError(f"report cannot be canonicalised: {type(error).__name__}: {error}") from None


def parse_statement(payload: bytes) -> dict[str, Any]:
    """Parse a signed payload, checking it is a canonical in-toto Statement v1 with our predicate type.

    Requiring canonical bytes means the signed bytes and the parsed object agree
    exactly: no duplicate keys, no alternative number spellings, nothing ignored.
    """
    statement = parse_json(payload, what="payload")
    try:
        canonical = rfc8785.dumps(statement)
    except rfc8785.CanonicalizationError:
        canonical = None
    if canonical != payload:
        raise VerificationError("payload is not RFC 8785 canonical JSON")
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise VerificationError(f"payload is not an in-toto Statement v1 (_type must be {STATEMENT_TYPE})")
    predicate_type = statement.get("predicateType")
    if predicate_type != PREDICATE_TYPE:
        shown = repr(predicate_type) if not isinstance(predicate_type, str) else ascii(predicate_type[:80])
        raise VerificationError(f"wrong predicate type {shown}; expected {PREDICATE_TYPE}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        raise VerificationError("statement must have exactly one subject")
    if not isinstance(statement.get("predicate"), dict):
        raise VerificationError("statement predicate must be an object")
    return statement
