"""Signing reports: report -> in-toto statement -> DSSE envelope, and writing both files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.errors import ReportError, VerificationError
from grader.files import atomic_write_bytes
from grader.reports.dsse import envelope_json, sign_payload
from grader.reports.keys import keyid, load_private_key
from grader.reports.model import report_json, validate_report
from grader.reports.statement import PAYLOAD_TYPE, canonical_bytes, make_statement
from grader.reports.verify import VerifiedReport, verify_envelope

#: Name of the plain (unsigned, human-readable) copy written beside an envelope.
REPORT_NAME = "report.json"
#: Suggested name of the envelope file.
ENVELOPE_NAME = "report.dsse.json"


def sign_report(report: dict, private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """A DSSE envelope (dict) over the canonical in-toto statement of ``report``.

    The report is validated first, and the envelope is verified with the public
    half before it is returned, so a report that could not be verified is never
    handed out as signed.
    """
    envelope, _ = _sign_and_check(report, private_key)
    return envelope


def _sign_and_check(report: dict, private_key: Ed25519PrivateKey) -> tuple[dict[str, Any], VerifiedReport]:
    validate_report(report)
    payload = canonical_bytes(make_statement(report))
    public_key = private_key.public_key()
    envelope = sign_payload(PAYLOAD_TYPE, payload, private_key, keyid(public_key))
    try:
        verified = verify_envelope(envelope_json(envelope), public_key)
    except VerificationError as error:
        raise ReportError(f"signed report does not verify: {error}") from None
    return envelope, verified


def write_signed_report(report: dict, key_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Sign ``report`` with the private key at ``key_path``; write the envelope to ``out_path``.

    A plain ``report.json`` is written beside the envelope. It holds the report
    exactly as ``grader verify --json`` prints it (numbers as read back from the
    signed payload), so the two can be compared byte for byte. Both writes are
    atomic; the envelope is written last. Returns (envelope path, report path).
    """
    envelope_path = Path(out_path)
    plain_path = envelope_path.parent / REPORT_NAME
    if envelope_path.name == REPORT_NAME:
        raise ReportError(f"{envelope_path}: the envelope cannot be named {REPORT_NAME}; that is the plain copy")
    private_key = load_private_key(key_path)
    envelope, verified = _sign_and_check(report, private_key)
    for path, data in ((plain_path, report_json(verified.report)), (envelope_path, envelope_json(envelope))):
        try:
            atomic_write_bytes(path, data)
        except OSError as error:
            raise ReportError(f"{path}: cannot write: {error.strerror or error}") from None
    return envelope_path, plain_path
