"""Tests of signing keys: generation, permissions, refusal to overwrite, no leaks in errors."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.errors import KeyFileError
from grader.reports.keys import keyid, load_private_key, load_public_key, private_key_pem, write_keypair

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@posix_only
def test_write_keypair_writes_a_matching_pair_with_safe_modes(tmp_path):
    private_path, public_path = write_keypair(tmp_path / "keys")
    assert private_path.name == "grader.key" and public_path.name == "grader.pub"
    assert _mode(private_path) == 0o600
    assert _mode(public_path) & 0o022 == 0
    assert private_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert public_path.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    private = load_private_key(private_path)
    public = load_public_key(public_path)
    public.verify(private.sign(b"message"), b"message")
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32 and keyid(public) == hashlib.sha256(raw).hexdigest()
    # Only the two key files: no temporary files left behind.
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == ["grader.key", "grader.pub"]


@pytest.mark.parametrize("existing", ["grader.key", "grader.pub"])
def test_write_keypair_refuses_to_overwrite_and_writes_nothing(tmp_path, existing):
    (tmp_path / existing).write_bytes(b"precious")
    with pytest.raises(KeyFileError, match="already exists"):
        write_keypair(tmp_path)
    assert (tmp_path / existing).read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == [existing]


@posix_only
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o700 | 0o004])
def test_group_or_world_accessible_private_key_is_refused(tmp_path, mode):
    path = tmp_path / "grader.key"
    path.write_bytes(private_key_pem(Ed25519PrivateKey.generate()))
    os.chmod(path, mode)
    with pytest.raises(KeyFileError) as caught:
        load_private_key(path)
    assert "chmod 600" in str(caught.value)
    assert "\n" not in str(caught.value)
    os.chmod(path, 0o600)
    load_private_key(path)


def _secret_lines(data: bytes) -> list[str]:
    return [line for line in data.decode().splitlines() if line and not line.startswith("-----")]


@posix_only
def test_errors_about_malformed_key_files_do_not_quote_them(tmp_path):
    real = private_key_pem(Ed25519PrivateKey.generate())
    lines = real.splitlines()
    # A damaged key: the base64 body is cut short, and a marker is appended.
    damaged = b"\n".join([lines[0], lines[1][:-4], b"SECRET-MARKER-1234", lines[-1]]) + b"\n"
    cases = {
        "damaged.key": damaged,
        "text.key": b"SECRET-MARKER-1234 this is not a key\n",
        "binary.key": bytes(range(256)),
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        os.chmod(path, 0o600)
        with pytest.raises(KeyFileError) as caught:
            load_private_key(path)
        text = f"{caught.value} {caught.value.hint or ''}"
        assert "SECRET-MARKER" not in text
        for line in _secret_lines(real):
            assert line[:16] not in text
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
    # A private key given where the public key is expected is refused without quoting it.
    path = tmp_path / "grader.key"
    path.write_bytes(real)
    with pytest.raises(KeyFileError, match="is a private key") as caught:
        load_public_key(path)
    for line in _secret_lines(real):
        assert line[:16] not in str(caught.value)


@posix_only
def test_other_key_kinds_are_refused(tmp_path):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_path = tmp_path / "rsa.key"
    private_path.write_bytes(rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    os.chmod(private_path, 0o600)
    with pytest.raises(KeyFileError, match="not an Ed25519 private key"):
        load_private_key(private_path)
    public_path = tmp_path / "rsa.pub"
    public_path.write_bytes(rsa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(KeyFileError, match="not an Ed25519 public key"):
        load_public_key(public_path)
    encrypted_path = tmp_path / "encrypted.key"
    encrypted_path.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    os.chmod(encrypted_path, 0o600)
    with pytest.raises(KeyFileError, match="encrypted"):
        load_private_key(encrypted_path)


def test_missing_key_files(tmp_path):
    with pytest.raises(KeyFileError, match="cannot read key file"):
        load_public_key(tmp_path / "absent.pub")
    with pytest.raises(KeyFileError, match="cannot read key file"):
        load_private_key(tmp_path / "absent.key")
