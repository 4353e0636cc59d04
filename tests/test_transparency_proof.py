"""C2SP tlog-proof files: the format byte for byte, round trips, and offline verification."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.transparency.checkpoint import Checkpoint, sign_checkpoint
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import MemoryTree, inclusion_proof, leaf_hash
from grader.transparency.note import NoteSigner
from grader.transparency.proof import HEADER, TlogProof

ORIGIN = "grader.example/comp"
SIGNER = NoteSigner(ORIGIN, Ed25519PrivateKey.generate())
ENTRIES = [f"entry {number}".encode() for number in range(13)]
TREE = MemoryTree.from_entries(ENTRIES)
NOTE = sign_checkpoint(Checkpoint(ORIGIN, 13, TREE.root()), SIGNER)


def _proof(index: int, extra: bytes | None = None) -> TlogProof:
    return TlogProof(index, tuple(inclusion_proof(TREE, index, 13)), NOTE, extra)


def test_the_file_has_the_specified_layout() -> None:
    proof = _proof(5, extra=b"receipt")
    hashes = inclusion_proof(TREE, 5, 13)
    expected = (
        f"{HEADER}\nextra {base64.b64encode(b'receipt').decode()}\nindex 5\n"
        + "".join(f"{base64.b64encode(item).decode()}\n" for item in hashes)
        + "\n"
    )
    assert proof.to_bytes() == expected.encode() + NOTE
    assert TlogProof.parse(proof.to_bytes()) == proof
    assert not _proof(5).to_bytes().startswith(f"{HEADER}\nextra".encode())
    assert TlogProof.parse(_proof(5).to_bytes()) == _proof(5)


def test_every_entry_verifies_offline() -> None:
    for index, entry in enumerate(ENTRIES):
        parsed = TlogProof.parse(_proof(index).to_bytes())
        checkpoint = parsed.verify(leaf_hash(entry), [SIGNER.verifier], origin=ORIGIN)
        assert (checkpoint.size, checkpoint.root_hash) == (13, TREE.root())


def test_a_proof_of_a_one_entry_tree_has_no_hash_lines() -> None:
    tree = MemoryTree.from_entries([b"only"])
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, tree.root()), SIGNER)
    data = TlogProof(0, (), note).to_bytes()
    assert data == f"{HEADER}\nindex 0\n\n".encode() + note
    TlogProof.parse(data).verify(leaf_hash(b"only"), [SIGNER.verifier])


def test_wrong_entry_index_key_or_origin_is_refused() -> None:
    proof = TlogProof.parse(_proof(5).to_bytes())
    with pytest.raises(LogVerificationError):
        proof.verify(leaf_hash(ENTRIES[6]), [SIGNER.verifier])
    with pytest.raises(LogVerificationError):
        TlogProof(6, proof.hashes, NOTE).verify(leaf_hash(ENTRIES[5]), [SIGNER.verifier])
    with pytest.raises(LogVerificationError, match="trusted key"):
        proof.verify(leaf_hash(ENTRIES[5]), [NoteSigner(ORIGIN, Ed25519PrivateKey.generate()).verifier])
    with pytest.raises(LogVerificationError, match="from log"):
        proof.verify(leaf_hash(ENTRIES[5]), [SIGNER.verifier], origin="grader.example/other")
    # An index beyond the checkpoint's size.
    with pytest.raises(LogVerificationError):
        TlogProof(13, proof.hashes, NOTE).verify(leaf_hash(ENTRIES[5]), [SIGNER.verifier])


@pytest.mark.parametrize(
    "mangle",
    [
        lambda data: data.replace(HEADER.encode(), b"c2sp.org/tlog-proof@v2"),
        lambda data: data.replace(b"index 5", b"index 05"),
        lambda data: data.replace(b"index 5", b"idx 5"),
        lambda data: data.replace(b"\n\n", b"\n", 1),
        lambda data: data.replace(b"index 5\n", b"index 5\nAAAA\n"),
        lambda data: data.replace(b"index 5\n", b"index 5\n!!!!\n"),
        lambda data: data.replace(b"index 5\n", b"index 5\nextra AAAA\n"),  # extra after the index
        lambda data: b"\xff" + data,
    ],
)
def test_malformed_files_are_refused(mangle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LogVerificationError):
        TlogProof.parse(mangle(_proof(5).to_bytes()))


def test_a_changed_checkpoint_is_refused() -> None:
    data = _proof(5).to_bytes().replace(b"\n13\n", b"\n14\n")
    with pytest.raises(LogVerificationError, match="does not verify"):
        TlogProof.parse(data).verify(leaf_hash(ENTRIES[5]), [SIGNER.verifier])
