"""Tests of the signed form: DSSE envelope, in-toto statement, tamper detection, interop."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os

import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.cli.exits import exit_status
from grader.errors import KeyFileError, ReportError, VerificationError
from grader.reports.dsse import envelope_json, pae, sign_payload
from grader.reports.example import example_report
from grader.reports.keys import keyid, private_key_pem
from grader.reports.model import report_json
from grader.reports.signing import sign_report, write_signed_report
from grader.reports.statement import PAYLOAD_TYPE, PREDICATE_TYPE, canonical_bytes, make_statement
from grader.reports.verify import VerifiedReport, verify_envelope, verify_report_file

#: Most payload positions a tamper test flips; spread evenly across long payloads.
MAX_TAMPER_POSITIONS = 300


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def report() -> dict:
    return example_report()


@pytest.fixture(scope="module")
def envelope(report, key) -> dict:
    return sign_report(report, key)


def _with_payload(envelope: dict, payload: bytes) -> bytes:
    edited = copy.deepcopy(envelope)
    edited["payload"] = base64.b64encode(payload).decode()
    return envelope_json(edited)


def _with_signature(envelope: dict, signature: bytes) -> bytes:
    edited = copy.deepcopy(envelope)
    edited["signatures"][0]["sig"] = base64.b64encode(signature).decode()
    return envelope_json(edited)


def _failure(envelope_bytes: bytes, public_key) -> str:
    with pytest.raises(VerificationError) as caught:
        verify_envelope(envelope_bytes, public_key)
    assert exit_status(caught.value) == 1
    return str(caught.value)


def _signed_statement(statement_bytes: bytes, key: Ed25519PrivateKey) -> bytes:
    """An envelope genuinely signed by ``key`` around arbitrary payload bytes."""
    return envelope_json(sign_payload(PAYLOAD_TYPE, statement_bytes, key, keyid(key.public_key())))


def test_pae_matches_the_dsse_spec_test_vector():
    expected = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert pae("http://example.com/HelloWorld", b"hello world") == expected


def test_pae_counts_bytes_not_characters():
    assert pae("t\u00e9", "\u00e9".encode()) == "DSSEv1 3 t\u00e9 2 \u00e9".encode()


def test_round_trip(report, key, envelope):
    verified = verify_envelope(envelope_json(envelope), key.public_key())
    assert isinstance(verified, VerifiedReport)
    assert verified.report == report
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert verified.keyid == hashlib.sha256(raw).hexdigest() == envelope["signatures"][0]["keyid"]
    statement = verified.statement
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://grader.dev/grading-report/v1"
    assert statement["subject"] == [{"name": report["subject"]["name"], "digest": report["subject"]["digest"]}]
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert set(envelope) == {"payloadType", "payload", "signatures"}


def test_envelope_uses_standard_padded_base64_and_canonical_payload(report, envelope):
    payload = base64.b64decode(envelope["payload"], validate=True)
    assert base64.b64encode(payload).decode() == envelope["payload"]
    assert payload == rfc8785.dumps(make_statement(report))
    assert len(base64.b64decode(envelope["signatures"][0]["sig"], validate=True)) == 64


def test_canonical_form_is_independent_of_insertion_order(report, key):
    def reverse(value):
        if isinstance(value, dict):
            return {k: reverse(value[k]) for k in reversed(list(value))}
        return value

    reordered = reverse(report)
    assert list(reordered) != list(report)
    assert canonical_bytes(make_statement(reordered)) == canonical_bytes(make_statement(report))
    # Ed25519 is deterministic, so the whole envelope is the same too.
    assert sign_report(reordered, key) == sign_report(report, key)


def _positions(length: int) -> list[int]:
    if length <= MAX_TAMPER_POSITIONS:
        return list(range(length))
    step = length / MAX_TAMPER_POSITIONS
    return sorted({int(i * step) for i in range(MAX_TAMPER_POSITIONS)} | {0, length - 1})


def test_every_single_byte_tamper_of_the_payload_fails(key, envelope):
    payload = base64.b64decode(envelope["payload"])
    positions = _positions(len(payload))
    assert len(positions) >= min(len(payload), MAX_TAMPER_POSITIONS)
    for position in positions:
        for flip in (0x01, 0x80):
            tampered = bytearray(payload)
            tampered[position] ^= flip
            message = _failure(_with_payload(envelope, bytes(tampered)), key.public_key())
            assert message == "bad signature", (position, flip, message)


def test_every_single_byte_tamper_of_the_signature_fails(key, envelope):
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    for position in range(len(signature)):
        tampered = bytearray(signature)
        tampered[position] ^= 0x01
        assert _failure(_with_signature(envelope, bytes(tampered)), key.public_key()) == "bad signature"


def test_truncated_or_extended_signature_fails(key, envelope):
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    for bad in (signature[:-1], signature + b"\0", b""):
        assert _failure(_with_signature(envelope, bad), key.public_key()) == "bad signature"


def test_wrong_key_is_a_key_mismatch(envelope):
    other = Ed25519PrivateKey.generate().public_key()
    message = _failure(envelope_json(envelope), other)
    assert message.startswith("key mismatch: envelope keyid")
    assert envelope["signatures"][0]["keyid"] in message
    assert keyid(other) in message


def test_wrong_key_with_forged_keyid_is_a_bad_signature(envelope):
    other = Ed25519PrivateKey.generate().public_key()
    forged = copy.deepcopy(envelope)
    forged["signatures"][0]["keyid"] = keyid(other)
    assert _failure(envelope_json(forged), other) == "bad signature"


def test_edited_and_reencoded_report_fails(report, key, envelope):
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["aggregate"]["score"] = 0.99
    statement["predicate"]["tasks"]["cosqa"]["measures"]["NDCG@10"] = 0.99
    assert _failure(_with_payload(envelope, rfc8785.dumps(statement)), key.public_key()) == "bad signature"


def test_checks_run_in_the_documented_order(key, envelope):
    public = key.public_key()
    assert "not valid JSON" in _failure(b"{not json", public)
    assert "not valid JSON" in _failure(b"\xff\xfe", public)
    assert "not a DSSE envelope" in _failure(b"[]", public)
    no_sigs = dict(envelope, signatures=[])
    assert "'signatures' must be a non-empty list" in _failure(envelope_json(no_sigs), public)
    no_keyid = dict(envelope, signatures=[{"sig": envelope["signatures"][0]["sig"]}])
    assert "keyid must be a string" in _failure(envelope_json(no_keyid), public)
    # A wrong payload type is reported before the (also wrong) key.
    wrong_type = dict(envelope, payloadType="text/plain\nX")
    message = _failure(envelope_json(wrong_type), Ed25519PrivateKey.generate().public_key())
    assert message.startswith("wrong payload type 'text/plain\\nX'") and "\n" not in message
    assert "invalid base64 in payload" in _failure(envelope_json(dict(envelope, payload="@@@@")), public)
    unpadded = dict(envelope, payload=envelope["payload"].rstrip("="))
    if unpadded["payload"] != envelope["payload"]:
        assert "invalid base64 in payload" in _failure(envelope_json(unpadded), public)
    bad_sig = copy.deepcopy(envelope)
    bad_sig["signatures"][0]["sig"] = "not base64!"
    assert "invalid base64 in signature" in _failure(envelope_json(bad_sig), public)


def test_signed_but_non_canonical_payload_fails(report, key):
    pretty = json.dumps(make_statement(report), indent=2).encode()
    assert _failure(_signed_statement(pretty, key), key.public_key()) == "payload is not RFC 8785 canonical JSON"


def test_signed_but_wrong_statement_type_or_predicate_type_fails(report, key):
    statement = make_statement(report)
    statement["predicateType"] = "https://example.com/other/v1"
    assert "wrong predicate type" in _failure(_signed_statement(rfc8785.dumps(statement), key), key.public_key())
    statement = make_statement(report)
    statement["_type"] = "https://in-toto.io/Statement/v0.1"
    assert "in-toto Statement v1" in _failure(_signed_statement(rfc8785.dumps(statement), key), key.public_key())


def test_signed_but_schema_violating_report_fails_naming_the_pointer(report, key):
    statement = make_statement(copy.deepcopy(report))
    statement["predicate"]["tasks"]["cosqa"]["measures"]["NDCG@10"] = 7
    message = _failure(_signed_statement(rfc8785.dumps(statement), key), key.public_key())
    assert message.startswith("schema violation at /tasks/cosqa/measures/NDCG@10: ")


def test_signed_but_subject_mismatch_fails(report, key):
    statement = make_statement(report)
    statement["subject"][0]["digest"] = {"sha256": "f" * 64}
    message = _failure(_signed_statement(rfc8785.dumps(statement), key), key.public_key())
    assert message.startswith("subject mismatch")


def test_sign_report_refuses_an_invalid_report(report, key):
    broken = copy.deepcopy(report)
    broken["tasks"]["cosqa"]["measures"]["foo"] = 0.5
    with pytest.raises(ReportError, match="/tasks/cosqa/measures/foo"):
        sign_report(broken, key)


def _write_key(path, key: Ed25519PrivateKey, mode: int = 0o600):
    path.write_bytes(private_key_pem(key))
    os.chmod(path, mode)
    return path


def test_write_signed_report_writes_envelope_and_plain_copy(tmp_path, report, key):
    key_path = _write_key(tmp_path / "grader.key", key)
    envelope_path, plain_path = write_signed_report(report, key_path, tmp_path / "out" / "report.dsse.json")
    assert plain_path == tmp_path / "out" / "report.json"
    verified = verify_report_file(envelope_path, key.public_key())
    assert verified.report == report
    assert plain_path.read_bytes() == report_json(verified.report)
    assert json.loads(plain_path.read_bytes()) == report
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.dsse.json", "report.json"]


def test_write_signed_report_refuses_unsafe_key_and_clashing_name(tmp_path, report, key):
    key_path = _write_key(tmp_path / "grader.key", key, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        write_signed_report(report, key_path, tmp_path / "out" / "report.dsse.json")
    assert not (tmp_path / "out").exists()
    os.chmod(key_path, 0o600)
    with pytest.raises(ReportError):
        write_signed_report(report, key_path, tmp_path / "out" / "report.json")


def test_verify_report_file_prefixes_errors_with_the_path(tmp_path, key):
    missing = tmp_path / "nope.dsse.json"
    with pytest.raises(VerificationError, match=r"nope\.dsse\.json: unreadable file: "):
        verify_report_file(missing, key.public_key())
    garbage = tmp_path / "garbage.json"
    garbage.write_text("hello")
    with pytest.raises(VerificationError, match=r"garbage\.json: file is not valid JSON"):
        verify_report_file(garbage, key.public_key())


def test_no_private_key_material_in_the_envelope(key, envelope):
    text = envelope_json(envelope)
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    payload = base64.b64decode(envelope["payload"])
    for needle in (raw, raw.hex().encode(), base64.b64encode(raw)):
        assert needle not in text and needle not in payload


# --- an independent DSSE implementation agrees with ours ---------------------------------


def test_securesystemslib_verifies_our_envelope(key, envelope):
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError as SslibVerificationError
    from securesystemslib.signer import SSlibKey

    public = SSlibKey.from_crypto(key.public_key(), keyid=keyid(key.public_key()))
    theirs = Envelope.from_dict(copy.deepcopy(envelope))
    assert theirs.pae() == pae(envelope["payloadType"], base64.b64decode(envelope["payload"]))
    accepted = theirs.verify([public], 1)
    assert list(accepted) == [keyid(key.public_key())]

    # The same check rejects a tampered envelope, so the acceptance above means something.
    tampered = copy.deepcopy(envelope)
    payload = bytearray(base64.b64decode(tampered["payload"]))
    payload[len(payload) // 2] ^= 0x01
    tampered["payload"] = base64.b64encode(bytes(payload)).decode()
    with pytest.raises(SslibVerificationError):
        Envelope.from_dict(tampered).verify([public], 1)


def test_we_verify_an_envelope_signed_by_securesystemslib(report, key):
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    public = SSlibKey.from_crypto(key.public_key(), keyid=keyid(key.public_key()))
    theirs = Envelope(rfc8785.dumps(make_statement(report)), PAYLOAD_TYPE, {})
    theirs.sign(CryptoSigner(key, public))
    verified = verify_envelope(json.dumps(theirs.to_dict()).encode(), key.public_key())
    assert verified.report == report
    assert verified.statement["predicateType"] == PREDICATE_TYPE


def test_write_signed_report_turns_write_failures_into_report_errors(tmp_path, report, key):
    key_path = _write_key(tmp_path / "grader.key", key)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.dsse.json").mkdir()  # a folder where the envelope should go
    with pytest.raises(ReportError, match="cannot write"):
        write_signed_report(report, key_path, tmp_path / "out" / "report.dsse.json")
