"""``grader log verify-proof``: an entry's tlog-proof checked offline, with the exit statuses of ``grader verify``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from click.testing import Result
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.transparency.checkpoint import Checkpoint, sign_checkpoint
from grader.transparency.commitments import EntryCommitter, new_identifier_key
from grader.transparency.entries import end_entry, receipt_entry
from grader.transparency.merkle import MemoryTree, inclusion_proof, leaf_hash
from grader.transparency.note import NoteSigner
from grader.transparency.proof import TlogProof

ORIGIN = "grader.example/comp"
SIGNER = NoteSigner(ORIGIN, Ed25519PrivateKey.generate())
TIME = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _log(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A log of five entries whose entry 3 is a receipt: (proof file, entry file, entry bytes)."""
    receipt = receipt_entry(EntryCommitter.fresh(new_identifier_key()), time=TIME, participant="p1", submission="7", upload_sha256="ab" * 32)
    entries = [end_entry(time=TIME)] * 3 + [receipt, end_entry(time=TIME)]
    tree = MemoryTree.from_entries(entries)
    note = sign_checkpoint(Checkpoint(ORIGIN, 5, tree.root()), SIGNER)
    proof = tmp_path / "receipt.tlog-proof"
    proof.write_bytes(TlogProof(3, tuple(inclusion_proof(tree, 3, 5)), note).to_bytes())
    entry = tmp_path / "receipt.json"
    entry.write_bytes(receipt)
    return proof, entry, receipt


def test_a_logged_entry_verifies(grader_cli: Callable[..., Result], tmp_path: Path) -> None:
    proof, entry, receipt = _log(tmp_path)
    result = grader_cli("log", "verify-proof", proof, "--log-key", SIGNER.verifier.vkey, "--entry", entry)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"verified: receipt entry 3 is in log {ORIGIN} (tree size 5, root ")
    key_file = tmp_path / "log.vkey"
    key_file.write_text(SIGNER.verifier.vkey + "\n")
    result = grader_cli("log", "verify-proof", proof, "--log-key", key_file, "--leaf-hash", leaf_hash(receipt).hex())
    assert result.exit_code == 0, result.output
    assert result.output.startswith("verified: entry 3 ")


def test_a_changed_entry_another_key_or_a_bad_file_exit_1(grader_cli: Callable[..., Result], tmp_path: Path) -> None:
    proof, entry, _receipt = _log(tmp_path)
    other = tmp_path / "other.json"
    other.write_bytes(end_entry(time=TIME))
    cases = [
        ("--log-key", SIGNER.verifier.vkey, "--entry", other),
        ("--log-key", NoteSigner(ORIGIN, Ed25519PrivateKey.generate()).verifier.vkey, "--entry", entry),
        ("--log-key", SIGNER.verifier.vkey, "--entry", entry, "--origin", "grader.example/elsewhere"),
    ]
    for case in cases:
        result = grader_cli("log", "verify-proof", proof, *case)
        assert result.exit_code == 1, (case, result.output)
        assert result.output.startswith("error: ") and len(result.output.splitlines()) == 1
    proof.write_bytes(proof.read_bytes().replace(b"index 3", b"index 2"))
    result = grader_cli("log", "verify-proof", proof, "--log-key", SIGNER.verifier.vkey, "--entry", entry)
    assert result.exit_code == 1
    result = grader_cli("log", "verify-proof", tmp_path / "missing", "--log-key", SIGNER.verifier.vkey, "--entry", entry)
    assert result.exit_code == 1 and "cannot read the proof" in result.output


def test_usage_errors_exit_2(grader_cli: Callable[..., Result], tmp_path: Path) -> None:
    proof, entry, _receipt = _log(tmp_path)
    for case in (
        ("--log-key", "not a key", "--entry", entry),
        ("--log-key", SIGNER.verifier.vkey),
        ("--log-key", SIGNER.verifier.vkey, "--leaf-hash", "abcd"),
    ):
        result = grader_cli("log", "verify-proof", proof, *case)
        assert result.exit_code == 2, (case, result.output)
