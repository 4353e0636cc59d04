"""Grading reports: the report model, its signed (DSSE + in-toto) form, keys and verification."""

from grader.reports.keys import keyid, load_private_key, load_public_key, write_keypair
from grader.reports.model import build_report, report_json, validate_report
from grader.reports.signing import ENVELOPE_NAME, REPORT_NAME, sign_report, write_signed_report
from grader.reports.summary import format_summary
from grader.reports.verify import VerifiedReport, verify_envelope, verify_report_file

__all__ = [
    "ENVELOPE_NAME",
    "REPORT_NAME",
    "VerifiedReport",
    "build_report",
    "format_summary",
    "keyid",
    "load_private_key",
    "load_public_key",
    "report_json",
    "sign_report",
    "validate_report",
    "verify_envelope",
    "verify_report_file",
    "write_keypair",
    "write_signed_report",
]
