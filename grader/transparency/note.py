"""C2SP ``signed-note``: text signed by one or more keys, with Ed25519 keys (signature type 0x01).

A note is its text (UTF-8, ending in a newline, no control character but newline), a blank line,
and one or more signature lines ``— <key name> <base64(key id || signature)>``. The key id is
the first four bytes of ``SHA-256(name || 0x0A || 0x01 || public key)``; a *verifier key* (vkey)
is published as ``<name>+<hex key id>+<base64(0x01 || public key)>``.

Opening a note follows the specification: signatures from unknown keys are ignored; a signature
from a known key (same name and id) must verify, or the whole note is refused; at least one
known key must have signed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grader.errors import UsageError
from grader.text import quote_id
from grader.transparency.errors import LogVerificationError

#: Signature type byte of Ed25519 note signatures.
ED25519 = 0x01
#: The em dash (U+2014) and space that start a signature line.
SIGNATURE_PREFIX = "\u2014 "
#: Largest note accepted, in bytes, and most signature lines: far above a checkpoint with 16 cosignatures.
MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURES = 100
_ED25519_SIGNATURE = 64
# Key names: non-empty, no Unicode space and no "+" (the vkey separator).
_BAD_NAME = re.compile(r"[\s+]")


def decode_base64(text: str, what: str) -> bytes:
    """Strict standard base64 (RFC 4648, section 4); :class:`LogVerificationError` naming ``what`` otherwise."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise LogVerificationError(f"{what} is not standard base64") from None


def check_key_name(name: str) -> None:
    """Raise :class:`~grader.errors.UsageError` unless ``name`` is a valid note key name."""
    if not name or _BAD_NAME.search(name) or not name.isprintable():
        raise UsageError(f"key name {quote_id(name)} is empty or holds a space, a '+' or a control character")


def key_id(name: str, public_key: bytes, signature_type: int = ED25519) -> bytes:
    """The 4-byte key id: ``SHA-256(name || 0x0A || type || public key)[:4]``."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([signature_type]) + public_key).digest()[:4]


def _raw_public(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class NoteVerifier:
    """A trusted Ed25519 note key: its name, id and public key."""

    name: str
    public_key: Ed25519PublicKey = field(repr=False)
    key_id: bytes = field(init=False)

    def __post_init__(self) -> None:
        check_key_name(self.name)
        object.__setattr__(self, "key_id", key_id(self.name, _raw_public(self.public_key)))

    @classmethod
    def from_vkey(cls, vkey: str) -> NoteVerifier:
        """Parse a verifier key ``<name>+<hex id>+<base64(0x01 || key)>``, checking that the id matches."""
        parts = vkey.strip().split("+", 2)  # the base64 key may hold "+" itself
        if len(parts) != 3 or not parts[0]:
            raise LogVerificationError("a verifier key is <name>+<hex key id>+<base64 key>")
        name, hex_id, material = parts
        raw = decode_base64(material, "the verifier key's public key")
        if len(raw) != 33 or raw[0] != ED25519:
            raise LogVerificationError("the verifier key is not an Ed25519 key (type 0x01 and 32 bytes)")
        try:
            check_key_name(name)
        except UsageError as error:
            raise LogVerificationError(str(error)) from None
        verifier = cls(name, Ed25519PublicKey.from_public_bytes(raw[1:]))
        if hex_id != verifier.key_id.hex():
            raise LogVerificationError(f"the verifier key's id {quote_id(hex_id)} does not match its name and key")
        return verifier

    @property
    def vkey(self) -> str:
        """This key in the verifier key encoding."""
        material = base64.b64encode(bytes([ED25519]) + _raw_public(self.public_key)).decode("ascii")
        return f"{self.name}+{self.key_id.hex()}+{material}"

    def verify(self, text: bytes, signature: bytes) -> bool:
        """Whether ``signature`` (without the key id) is this key's signature of ``text``."""
        if len(signature) != _ED25519_SIGNATURE:
            return False
        try:
            self.public_key.verify(signature, text)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class NoteSigner:
    """An Ed25519 note key that signs: its name and private key."""

    name: str
    private_key: Ed25519PrivateKey = field(repr=False)

    def __post_init__(self) -> None:
        check_key_name(self.name)

    @property
    def verifier(self) -> NoteVerifier:
        """The matching verifier (publish its :attr:`NoteVerifier.vkey`)."""
        return NoteVerifier(self.name, self.private_key.public_key())

    def signature_line(self, text: bytes) -> str:
        """``— <name> <base64(key id || signature)>`` and a newline, for ``text``."""
        blob = self.verifier.key_id + self.private_key.sign(text)
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(blob).decode('ascii')}\n"


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise UsageError("a note's text ends with a newline")
    if any(ord(char) < 0x20 and char != "\n" for char in text):
        raise UsageError("a note's text holds a control character other than newline")


def sign_note(text: str, signers: Iterable[NoteSigner]) -> bytes:
    """The signed note: ``text`` (ending in a newline), a blank line, one signature line per signer."""
    _check_text(text)
    body = text.encode("utf-8")
    lines = [signer.signature_line(body) for signer in signers]
    if not lines:
        raise UsageError("a note needs at least one signer")
    return body + b"\n" + "".join(lines).encode("utf-8")


@dataclass(frozen=True)
class Signature:
    """One signature line of a note: key name, key id and the signature bytes after the id."""

    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class OpenedNote:
    """A note whose signatures were checked: its text, the names of the trusted keys that signed it,
    and every signature line (known or not, for a caller that collects cosignatures)."""

    text: str
    verified_by: tuple[str, ...]
    signatures: tuple[Signature, ...]


def split_note(note: bytes) -> tuple[str, tuple[Signature, ...]]:
    """Split a note into its text and its signature lines, checking the format but no signature."""
    if len(note) > MAX_NOTE_BYTES:
        raise LogVerificationError(f"the note is larger than {MAX_NOTE_BYTES} bytes")
    try:
        decoded = note.decode("utf-8")
    except UnicodeDecodeError:
        raise LogVerificationError("the note is not UTF-8") from None
    if any(ord(char) < 0x20 and char != "\n" for char in decoded):
        raise LogVerificationError("the note holds a control character other than newline")
    cut = decoded.rfind("\n\n")
    if cut < 0:
        raise LogVerificationError("the note has no blank line before its signatures")
    text, block = decoded[: cut + 1], decoded[cut + 2 :]
    if not block.endswith("\n"):
        raise LogVerificationError("the note's last signature line does not end with a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise LogVerificationError(f"the note has more than {MAX_SIGNATURES} signatures")
    signatures = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith(SIGNATURE_PREFIX):
            raise LogVerificationError(f"signature line {number} does not start with an em dash and a space")
        name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        if not space or not name or _BAD_NAME.search(name) or " " in encoded:
            raise LogVerificationError(f"signature line {number} is not '— <key name> <base64 signature>'")
        blob = decode_base64(encoded, f"signature line {number}")
        if len(blob) < 5:
            raise LogVerificationError(f"signature line {number} is too short to hold a key id and a signature")
        signatures.append(Signature(name, blob[:4], blob[4:]))
    return text, tuple(signatures)


def open_note(note: bytes, verifiers: Iterable[NoteVerifier]) -> OpenedNote:
    """Check a signed note against the trusted ``verifiers``; raise :class:`LogVerificationError` unless
    every signature by a known key verifies and at least one does."""
    text, signatures = split_note(note)
    known = {(verifier.name, verifier.key_id): verifier for verifier in verifiers}
    body = text.encode("utf-8")
    verified: list[str] = []
    for signature in signatures:
        verifier = known.get((signature.name, signature.key_id))
        if verifier is None:
            continue  # the specification: ignore signatures from unknown keys
        if not verifier.verify(body, signature.signature):
            raise LogVerificationError(f"the signature of {quote_id(signature.name)} does not verify")
        if signature.name not in verified:
            verified.append(signature.name)
    if not verified:
        names = ", ".join(quote_id(name) for name, _key in known) or "none"
        raise LogVerificationError(f"the note is not signed by a trusted key (trusted: {names})")
    return OpenedNote(text, tuple(verified), signatures)
