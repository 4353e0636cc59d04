"""Signed notes and checkpoints, byte for byte against the Go reference, the C2SP example and a real log."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.errors import UsageError
from grader.transparency.checkpoint import Checkpoint, check_extends, open_checkpoint, sign_checkpoint
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import EMPTY_ROOT, MemoryTree, consistency_proof
from grader.transparency.note import NoteSigner, NoteVerifier, key_id, open_note, sign_note, split_note

# golang.org/x/mod/sumdb/note's documented example: its signer key (0x01 || Ed25519 seed), verifier key and note.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_NOTE = GO_TEXT + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
# The C2SP signed-note specification's example.
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = "This is an example message.\n\n\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
# A real checkpoint of Go's checksum database and that log's published key (the default GOSUMDB key).
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_NOTE = (
    "go.sum database tree\n65209736\n5+uGFjx6xBZG8ip1+wi77v+grwbhhukIrxEUS8PXvRo=\n\n"
    "\u2014 sum.golang.org Az3grnbssgK7ubgFX36gVETtNv0U23qxyAhAMai2QUfeGa3nB/akvkMdlUErfcZz7l/R3cVtYspg3dxXABkGZZKdsQ8=\n"
)


def _go_signer() -> NoteSigner:
    seed = base64.b64decode(GO_SKEY.split("+", 4)[4])
    assert seed[0] == 0x01
    return NoteSigner("PeterNeumann", Ed25519PrivateKey.from_private_bytes(seed[1:]))


def test_signing_reproduces_the_go_reference_note() -> None:
    signer = _go_signer()
    assert signer.verifier.vkey == GO_VKEY
    assert signer.verifier.key_id.hex() == "c74f20a3"
    assert sign_note(GO_TEXT, [signer]) == GO_NOTE.encode()
    opened = open_note(GO_NOTE.encode(), [NoteVerifier.from_vkey(GO_VKEY)])
    assert opened.text == GO_TEXT
    assert opened.verified_by == ("PeterNeumann",)


def test_the_c2sp_example_note_verifies() -> None:
    verifier = NoteVerifier.from_vkey(C2SP_VKEY)
    assert verifier.vkey == C2SP_VKEY
    assert open_note(C2SP_NOTE.encode(), [verifier]).text == "This is an example message.\n"


def test_a_real_sumdb_checkpoint_verifies() -> None:
    checkpoint = open_checkpoint(SUMDB_NOTE.encode(), [NoteVerifier.from_vkey(SUMDB_VKEY)], origin="go.sum database tree")
    assert checkpoint.size == 65209736
    assert base64.b64encode(checkpoint.root_hash).decode() == "5+uGFjx6xBZG8ip1+wi77v+grwbhhukIrxEUS8PXvRo="
    assert checkpoint.text() == SUMDB_NOTE.split("\n\n")[0] + "\n"


def test_key_id_is_the_specified_digest() -> None:
    import hashlib

    public = base64.b64decode(C2SP_VKEY.split("+", 2)[2])[1:]
    assert key_id("example.com/foo", public) == hashlib.sha256(b"example.com/foo\n\x01" + public).digest()[:4]
    assert key_id("example.com/foo", public).hex() == "530d903a"


def test_a_changed_note_or_signature_is_refused() -> None:
    verifier = NoteVerifier.from_vkey(GO_VKEY)
    with pytest.raises(LogVerificationError, match="does not verify"):
        open_note(GO_NOTE.replace("answer", "Answer").encode(), [verifier])
    blob = bytearray(base64.b64decode(GO_NOTE.rsplit(" ", 1)[1]))
    blob[10] ^= 1
    forged = GO_NOTE.rsplit(" ", 1)[0] + " " + base64.b64encode(bytes(blob)).decode() + "\n"
    with pytest.raises(LogVerificationError, match="does not verify"):
        open_note(forged.encode(), [verifier])


def test_unknown_signatures_are_ignored_but_one_trusted_is_needed() -> None:
    other = NoteSigner("witness.example/w1", Ed25519PrivateKey.generate())
    note = sign_note(GO_TEXT, [_go_signer(), other])
    opened = open_note(note, [NoteVerifier.from_vkey(GO_VKEY)])
    assert opened.verified_by == ("PeterNeumann",)
    assert [signature.name for signature in opened.signatures] == ["PeterNeumann", "witness.example/w1"]
    assert open_note(note, [other.verifier, NoteVerifier.from_vkey(GO_VKEY)]).verified_by == ("PeterNeumann", "witness.example/w1")
    with pytest.raises(LogVerificationError, match="not signed by a trusted key"):
        open_note(note, [NoteVerifier("PeterNeumann", Ed25519PrivateKey.generate().public_key())])
    # Same name, other key: a different key id, so ignored rather than failed, and the note is unsigned for us.
    with pytest.raises(LogVerificationError, match="not signed by a trusted key"):
        open_note(GO_NOTE.encode(), [NoteVerifier("PeterNeumann", other.private_key.public_key())])


@pytest.mark.parametrize(
    "note",
    [
        GO_TEXT.encode(),  # no signatures
        GO_NOTE[:-1].encode(),  # last line without its newline
        GO_NOTE.replace("\u2014 ", "- ").encode(),  # not an em dash
        GO_NOTE.replace("x08go", "x08go!").encode(),  # not base64
        GO_NOTE.replace("PeterNeumann ", "Peter+Neumann ").encode(),  # "+" in a key name
        GO_NOTE.replace("problem,", "problem,\t").encode(),  # a control character
        GO_NOTE.encode().replace(b"you", b"\xff"),  # not UTF-8
        (GO_TEXT + "\n\u2014 PeterNeumann AAAA\n").encode(),  # too short for a key id and a signature
    ],
)
def test_malformed_notes_are_refused(note: bytes) -> None:
    with pytest.raises(LogVerificationError):
        open_note(note, [NoteVerifier.from_vkey(GO_VKEY)])


@pytest.mark.parametrize(
    "vkey",
    [
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # wrong id
        "PeterNeumann+c74f20a3+AhpcQcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # wrong type or length
        "PeterNeumann+c74f20a3",
        "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ],
)
def test_malformed_verifier_keys_are_refused(vkey: str) -> None:
    with pytest.raises(LogVerificationError):
        NoteVerifier.from_vkey(vkey)


def test_signing_refuses_bad_text_and_names() -> None:
    signer = _go_signer()
    with pytest.raises(UsageError):
        sign_note("no final newline", [signer])
    with pytest.raises(UsageError):
        sign_note("a\x1bb\n", [signer])
    with pytest.raises(UsageError):
        NoteSigner("two words", signer.private_key)


def test_a_note_whose_text_has_blank_lines_splits_at_the_last_one() -> None:
    text = "first\n\nsecond\n\n"
    note = sign_note(text, [_go_signer()])
    assert split_note(note)[0] == text
    assert open_note(note, [NoteVerifier.from_vkey(GO_VKEY)]).text == text


def test_checkpoint_round_trip_and_signature() -> None:
    tree = MemoryTree.from_entries([b"a", b"b", b"c"])
    signer = NoteSigner("grader.example/comp", Ed25519PrivateKey.generate())
    checkpoint = Checkpoint("grader.example/comp", 3, tree.root(), ("extension one",))
    text = checkpoint.text()
    assert text == f"grader.example/comp\n3\n{base64.b64encode(tree.root()).decode()}\nextension one\n"
    note = sign_checkpoint(checkpoint, signer)
    assert note.startswith((text + "\n\u2014 grader.example/comp ").encode())
    assert open_checkpoint(note, [signer.verifier], origin="grader.example/comp") == checkpoint
    with pytest.raises(LogVerificationError, match="from log"):
        open_checkpoint(note, [signer.verifier], origin="grader.example/other")


@pytest.mark.parametrize(
    "text",
    [
        "origin\n3\n",  # no root line
        "origin\n03\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",  # leading zero
        "origin\n-3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
        "origin\n3\nAAAA\n",  # not 32 bytes
        "origin\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=\n",  # non-canonical base64
        "\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",  # empty origin
        "origin\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\nx\n",  # empty extension line
        "origin\n18446744073709551616\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",  # beyond uint64
    ],
)
def test_malformed_checkpoints_are_refused(text: str) -> None:
    with pytest.raises(LogVerificationError):
        Checkpoint.parse(text)


def test_check_extends_handles_the_client_cases() -> None:
    tree = MemoryTree.from_entries([f"e{number}".encode() for number in range(9)])
    fork = MemoryTree.from_entries([f"f{number}".encode() if number == 2 else f"e{number}".encode() for number in range(9)])

    def head(size: int, source: MemoryTree = tree, origin: str = "log.example/a") -> Checkpoint:
        return Checkpoint(origin, size, source.root(size))

    check_extends(None, head(5), [])  # nothing seen yet
    check_extends(Checkpoint("log.example/a", 0, EMPTY_ROOT), head(5), [])  # the empty tree
    check_extends(head(5), head(5), [])  # same size, same root
    check_extends(head(3), head(9), consistency_proof(tree, 3, 9))
    for seen, new, proof in (
        (head(5), head(5, fork), []),  # same size, other root
        (head(5), head(4), []),  # went back
        (head(5), head(9, origin="log.example/b"), consistency_proof(tree, 5, 9)),
        (head(3), head(9, fork), consistency_proof(fork, 3, 9)),  # history rewritten
        (head(3), head(9), consistency_proof(tree, 4, 9)),
        (Checkpoint("log.example/a", 0, tree.root(1)), head(5), []),
    ):
        with pytest.raises(LogVerificationError):
            check_extends(seen, new, proof)
