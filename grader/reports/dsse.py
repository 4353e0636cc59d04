"""DSSE (Dead Simple Signing Envelope) encoding: PAE, base64 and envelope shape.

This module knows nothing about reports; it signs and checks opaque payloads
exactly as https://github.com/secure-systems-lab/dsse/blob/master/protocol.md
describes, so that any DSSE implementation can check what we produce.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader import jsonio
from grader.errors import VerificationError

#: Longest piece of untrusted envelope text quoted back in an error message.
_QUOTE_LIMIT = 80


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's Pre-Authentication Encoding of ``payload`` with type ``payload_type``.

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` where the lengths are
    ASCII decimal byte counts. Signing this, not the bare payload, binds the type
    to the signature so a payload cannot be reinterpreted as another type.
    """
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def b64encode(data: bytes) -> str:
    """Standard base64 with padding, the encoding DSSE envelopes use."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str, *, what: str) -> bytes:
    """Decode standard padded base64 strictly, raising :class:`VerificationError` naming ``what``.

    Only the canonical encoding is accepted (what :func:`b64encode` writes), so an
    envelope has exactly one spelling and cannot be altered without notice.
    """
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        raise VerificationError(f"invalid base64 in {what}") from None
    if base64.b64encode(data).decode("ascii") != text:
        raise VerificationError(f"invalid base64 in {what}: not the canonical padded encoding")
    return data


def quote_untrusted(text: str) -> str:
    """Quote unverified text for an error message: ASCII-escaped, single-line, truncated."""
    shown = text if len(text) <= _QUOTE_LIMIT else text[:_QUOTE_LIMIT] + "..."
    # ascii() escapes control characters and newlines, so the message stays one line.
    return ascii(shown)


def sign_payload(payload_type: str, payload: bytes, private_key: Ed25519PrivateKey, keyid: str) -> dict[str, Any]:
    """A DSSE envelope (as a dict) carrying ``payload`` with one Ed25519 signature by ``private_key``."""
    signature = private_key.sign(pae(payload_type, payload))
    return {
        "payloadType": payload_type,
        "payload": b64encode(payload),
        "signatures": [{"keyid": keyid, "sig": b64encode(signature)}],
    }


def envelope_json(envelope: dict[str, Any]) -> bytes:
    """The bytes of an envelope file: sorted keys, indent 2, trailing newline."""
    return (jsonio.dumps(envelope, sort_keys=True, indent=2, ensure_ascii=True) + "\n").encode("utf-8")


@dataclass(frozen=True)
class EnvelopeFields:
    """The fields of an envelope whose shape is right; nothing in it is verified yet."""

    payload_type: str
    payload_b64: str
    #: (keyid, base64 signature) pairs in envelope order
    signatures: tuple[tuple[str, str], ...]


def parse_json(data: bytes, *, what: str) -> Any:
    """Parse strict JSON from ``data`` (:func:`grader.jsonio.loads`: UTF-8, no NaN/Infinity, no
    duplicate keys, bounded depth), raising :class:`VerificationError`.

    Duplicate keys matter most here: a consumer that keeps the first of two
    ``payload`` keys and one that keeps the last would read different payloads
    from one file, and only one of them is the signed one.
    """
    try:
        return jsonio.loads(data)
    except jsonio.JsonError as error:
        detail = error.what.removeprefix("invalid JSON: ")
        raise VerificationError(f"{what} is not valid JSON: {detail}") from None


def parse_envelope(data: bytes) -> EnvelopeFields:
    """Check that ``data`` is a JSON DSSE envelope of the right shape and return its fields.

    Signatures must carry a ``keyid``: DSSE makes it optional, but our verifier
    uses it to say which key a report was signed with when the key is wrong.
    """
    envelope = parse_json(data, what="file")
    if not isinstance(envelope, dict):
        raise VerificationError("not a DSSE envelope: expected a JSON object")
    for field in ("payloadType", "payload"):
        if not isinstance(envelope.get(field), str):
            raise VerificationError(f"not a DSSE envelope: '{field}' must be a string")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise VerificationError("not a DSSE envelope: 'signatures' must be a non-empty list")
    pairs: list[tuple[str, str]] = []
    for index, entry in enumerate(signatures):
        if not isinstance(entry, dict):
            raise VerificationError(f"not a DSSE envelope: signatures[{index}] must be an object")
        for field in ("keyid", "sig"):
            if not isinstance(entry.get(field), str):
                raise VerificationError(f"not a DSSE envelope: signatures[{index}].{field} must be a string")
        pairs.append((entry["keyid"], entry["sig"]))
    return EnvelopeFields(envelope["payloadType"], envelope["payload"], tuple(pairs))
