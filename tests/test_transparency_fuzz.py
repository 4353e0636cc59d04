"""Every reader of untrusted log bytes fails with one LogVerificationError, never another exception."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.transparency.checkpoint import Checkpoint, sign_checkpoint
from grader.transparency.commitments import EntryCommitter
from grader.transparency.entries import decode_entry, receipt_entry
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import MemoryTree, inclusion_proof
from grader.transparency.note import NoteSigner, NoteVerifier, open_note
from grader.transparency.proof import TlogProof
from grader.transparency.tiles import Tile, entry_bundle, parse_tile_path, split_entry_bundle

SIGNER = NoteSigner("log.example/fuzz", Ed25519PrivateKey.generate())
TREE = MemoryTree.from_entries([b"a", b"b", b"c"])
NOTE = sign_checkpoint(Checkpoint("log.example/fuzz", 3, TREE.root()), SIGNER)
PROOF = TlogProof(1, tuple(inclusion_proof(TREE, 1, 3)), NOTE, b"extra").to_bytes()
ENTRY = receipt_entry(EntryCommitter.fresh(b"k" * 32), time=datetime(2026, 1, 1, tzinfo=UTC), participant="p", submission="s", upload_sha256="0" * 64)
BUNDLE = entry_bundle([b"a", b"bb", b""])

READERS: dict[str, tuple[bytes, Callable[[bytes], Any]]] = {
    "note": (NOTE, lambda data: open_note(data, [SIGNER.verifier])),
    "proof": (PROOF, lambda data: TlogProof.parse(data).verify(TREE.node(0, 1), [SIGNER.verifier])),
    "entry": (ENTRY, decode_entry),
    "bundle": (BUNDLE, lambda data: split_entry_bundle(data, Tile("entries", 0, 3))),
    "tile path": (b"tile/1/x001/234.p/17", lambda data: parse_tile_path(data.decode("utf-8", "replace"))),
    "vkey": (SIGNER.verifier.vkey.encode(), lambda data: NoteVerifier.from_vkey(data.decode("utf-8", "replace"))),
}


def _mutations(data: bytes, rng: random.Random) -> list[bytes]:
    out = []
    for _ in range(150):
        changed = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            choice = rng.random()
            position = rng.randrange(len(changed) + 1)
            if choice < 0.4 and changed:
                changed[min(position, len(changed) - 1)] = rng.choice(b"\x00\n +=/\xe2\x80\x94x0A9\xff")
            elif choice < 0.7:
                del changed[position : position + rng.randint(1, 8)]
            else:
                changed[position:position] = rng.choice([b"\n", b"\n\n", b"\xe2\x80\x94 ", b"0", b"x", b"\x00"])
        out.append(bytes(changed))
    return out


@pytest.mark.parametrize("name", sorted(READERS))
def test_mangled_input_raises_only_log_verification_errors(name: str) -> None:
    data, reader = READERS[name]
    reader(data)  # the original is accepted
    rng = random.Random(name)
    refused = 0
    for mangled in _mutations(data, rng):
        try:
            reader(mangled)
        except LogVerificationError:
            refused += 1
    assert refused > 0
