"""docs/transparency.md stays true: its example checkpoint, proof file and entries verify with its verifier key."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from grader.transparency.checkpoint import open_checkpoint
from grader.transparency.commitments import entry_key
from grader.transparency.entries import decode_entry, entry_opens
from grader.transparency.merkle import MemoryTree
from grader.transparency.note import NoteVerifier
from grader.transparency.proof import TlogProof

DOC = (Path(__file__).resolve().parent.parent / "docs" / "transparency.md").read_text(encoding="utf-8")
BLOCKS = [block + "\n" for block in re.findall(r"```\n(.*?)\n```", DOC, flags=re.DOTALL)]
ORIGIN = "grader.example/cosqa-2026"


def _block(start: str) -> str:
    (found,) = [block for block in BLOCKS if block.startswith(start)]
    return found


def _vkey() -> NoteVerifier:
    return NoteVerifier.from_vkey(_block(f"{ORIGIN}+"))


def test_the_example_log_verifies(grader_cli: Callable[..., Result], tmp_path: Path) -> None:
    entry0, receipt = _block('{"blinding_commitment"').encode().strip(), _block('{"kind":"receipt"').encode().strip()
    assert decode_entry(entry0)["kind"] == "competition"
    tree = MemoryTree.from_entries([entry0, receipt])
    checkpoint = open_checkpoint(_block(f"{ORIGIN}\n2\n").encode(), [_vkey()], origin=ORIGIN)
    assert (checkpoint.size, checkpoint.root_hash) == (2, tree.root())
    proof = TlogProof.parse(_block("c2sp.org/tlog-proof@v1").encode())
    assert proof.verify(tree.node(0, 1), [_vkey()], origin=ORIGIN) == checkpoint
    # The command shown in the docs prints the line shown there.
    (tmp_path / "receipt.tlog-proof").write_bytes(_block("c2sp.org/tlog-proof@v1").encode())
    (tmp_path / "receipt.json").write_bytes(receipt)
    command = _block("grader log verify-proof")
    result = grader_cli("log", "verify-proof", tmp_path / "receipt.tlog-proof", "--entry", tmp_path / "receipt.json", "--log-key", _vkey().vkey)
    assert result.exit_code == 0, result.output
    assert result.output in command


def test_the_example_receipt_opens_with_its_entry_key() -> None:
    # The docs' example was made with identifier key SHA-256("docs identifier key") and salt 00..0f.
    receipt = decode_entry(_block('{"kind":"receipt"').encode().strip())
    key = entry_key(hashlib.sha256(b"docs identifier key").digest(), bytes.fromhex(receipt["salt"]))
    assert entry_opens(receipt, key, participant="alice", submission="1", upload=hashlib.sha256(b"archive").hexdigest())
