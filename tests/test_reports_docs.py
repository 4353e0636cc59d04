"""The standalone verifier in docs/reports.md works, using only cryptography and the stdlib."""

from __future__ import annotations

import ast
import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.reports.dsse import envelope_json
from grader.reports.example import example_report
from grader.reports.keys import private_key_pem, public_key_pem
from grader.reports.signing import write_signed_report

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reports.md"
_SCRIPT_BLOCK = re.compile(r"<!-- verify_report\.py: begin -->\n```python\n(.*?)```\n<!-- verify_report\.py: end -->", re.DOTALL)


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    match = _SCRIPT_BLOCK.search(DOCS.read_text(encoding="utf-8"))
    assert match, "docs/reports.md lost its verify_report.py block"
    source = match.group(1)
    # The documented script must stand alone: cryptography and the standard library only.
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported <= {"base64", "hashlib", "json", "sys", "cryptography"}, imported
    path = tmp_path_factory.mktemp("script") / "verify_report.py"
    path.write_text(source, encoding="utf-8")
    return path


@pytest.fixture()
def signed(tmp_path):
    key = Ed25519PrivateKey.generate()
    key_path = tmp_path / "grader.key"
    key_path.write_bytes(private_key_pem(key))
    key_path.chmod(0o600)
    pub_path = tmp_path / "grader.pub"
    pub_path.write_bytes(public_key_pem(key.public_key()))
    envelope_path, plain_path = write_signed_report(example_report(), key_path, tmp_path / "report.dsse.json")
    return envelope_path, plain_path, pub_path


def _run(script: Path, envelope: Path, pub: Path, cwd: Path) -> subprocess.CompletedProcess:
    # -I: isolated mode, so the script cannot pick up the grader package from the working tree.
    return subprocess.run(
        [sys.executable, "-I", str(script), str(envelope), str(pub)],
        capture_output=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_documented_script_verifies_a_signed_report(script, signed, tmp_path):
    envelope_path, plain_path, pub_path = signed
    result = _run(script, envelope_path, pub_path, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain_path.read_bytes()


@pytest.mark.slow
def test_documented_script_rejects_tampering_and_wrong_keys(script, signed, tmp_path):
    envelope_path, _, pub_path = signed
    envelope = json.loads(envelope_path.read_bytes())

    other_pub = tmp_path / "other.pub"
    other_pub.write_bytes(public_key_pem(Ed25519PrivateKey.generate().public_key()))
    result = _run(script, envelope_path, other_pub, tmp_path)
    assert result.returncode == 1 and result.stdout == b""
    assert b"key mismatch" in result.stderr

    payload = bytearray(base64.b64decode(envelope["payload"]))
    for position in (0, len(payload) // 3, len(payload) - 1):
        tampered = dict(envelope)
        changed = bytearray(payload)
        changed[position] ^= 0x01
        tampered["payload"] = base64.b64encode(bytes(changed)).decode()
        path = tmp_path / "tampered.json"
        path.write_bytes(envelope_json(tampered))
        result = _run(script, path, pub_path, tmp_path)
        assert result.returncode == 1 and result.stdout == b""
        assert result.stderr.decode().strip().endswith("bad signature")
        assert len(result.stderr.decode().splitlines()) == 1

    wrong_type = dict(envelope, payloadType="text/plain")
    path = tmp_path / "wrong-type.json"
    path.write_bytes(envelope_json(wrong_type))
    result = _run(script, path, pub_path, tmp_path)
    assert result.returncode == 1 and b"wrong payload type" in result.stderr


def test_documented_pae_example_matches_the_implementation():
    from grader.reports.dsse import pae

    text = DOCS.read_text(encoding="utf-8")
    example = pae("http://example.com/HelloWorld", b"hello world").decode()
    assert f"`{example}`" in text
