"""A log written as a tiles folder, read back and audited: every kind of tampering is caught."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import Result
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.transparency import entries as e
from grader.transparency.audit import audit_entries
from grader.transparency.checkpoint import Checkpoint, check_extends, sign_checkpoint
from grader.transparency.commitments import EntryCommitter, key_commitment
from grader.transparency.errors import InconsistentCheckpoints, LogVerificationError
from grader.transparency.merkle import MemoryTree, inclusion_proof
from grader.transparency.mirror import check_seen, read_log_folder, write_log_folder
from grader.transparency.note import NoteSigner
from grader.transparency.proof import TlogProof

ORIGIN = "grader.example/comp"
SIGNER = NoteSigner(ORIGIN, Ed25519PrivateKey.generate())
PARTITION, IDENTIFIERS = b"p" * 32, b"i" * 32
START = datetime(2026, 12, 1, tzinfo=UTC)
DIGEST = hashlib.sha256(b"d").hexdigest()


def _history(uploads: int, *, revealed: bool = True, identifiers: bytes = IDENTIFIERS) -> list[bytes]:
    """Entry 0, a receipt and a report per upload, the end and (optionally) the reveal."""
    log = [
        e.competition_entry(
            time=START,
            origin=ORIGIN,
            competition_sha256=DIGEST,
            partition_commitment=key_commitment(PARTITION),
            identifier_commitment=key_commitment(IDENTIFIERS),
            blinding_commitment=None,
            data_digests={"cosqa": DIGEST},
            host_key_id=DIGEST,
            log_key_id=DIGEST,
        )
    ]
    for number in range(uploads):
        time = START + timedelta(seconds=number)
        participant, submission = f"p{number % 7}", str(number)
        log.append(
            e.receipt_entry(EntryCommitter.fresh(IDENTIFIERS), time=time, participant=participant, submission=submission, upload_sha256=DIGEST)
        )
        log.append(
            e.report_entry(
                EntryCommitter.fresh(IDENTIFIERS),
                time=time,
                participant=participant,
                submission=submission,
                attempt=1,
                status="scored",
                payload_sha256=DIGEST,
                envelope_sha256=DIGEST,
            )
        )
    log.append(e.end_entry(time=START + timedelta(days=1)))
    if revealed:
        log.append(
            e.reveal_entry(
                time=START + timedelta(days=1),
                partition_secret=PARTITION,
                identifier_key=identifiers,
                blinding_key=None,
                public_board_sha256=DIGEST,
                private_board_sha256=DIGEST,
            )
        )
    return log


def _write(folder: Path, entries: list[bytes]) -> bytes:
    note = sign_checkpoint(Checkpoint(ORIGIN, len(entries), MemoryTree.from_entries(entries).root()), SIGNER)
    write_log_folder(folder, entries, note)
    return note


ENTRIES = _history(150)  # 303 entries: one full tile, a partial one, and a level-1 tile


def test_a_written_log_reads_back_and_passes_the_audit(tmp_path: Path) -> None:
    _write(tmp_path, ENTRIES)
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()) == [
        "checkpoint",
        "tile/0/000",
        "tile/0/001.p/47",
        "tile/1/000.p/1",
        "tile/entries/000",
        "tile/entries/001.p/47",
    ]
    contents = read_log_folder(tmp_path, [SIGNER.verifier], origin=ORIGIN)
    assert contents.entries == tuple(ENTRIES) and contents.checkpoint.size == 303
    summary = audit_entries(contents.entries)
    assert summary.kinds == {"competition": 1, "end": 1, "receipt": 150, "report": 150, "reveal": 1}
    assert summary.revealed and summary.retracted == ()


def _replace_with_link(path: Path) -> None:
    """``path`` becomes a link to a copy of itself: the same bytes, which the audit must still refuse."""
    copy = path.with_name(path.name + ".copy")
    path.rename(copy)
    path.symlink_to(copy)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (
            lambda root: (root / "tile/entries/000").write_bytes((root / "tile/entries/000").read_bytes().replace(b'"scored"', b'"failed"', 1)),
            "do not match",
        ),
        (lambda root: (root / "tile/0/001.p/47").unlink(), "cannot read"),
        (lambda root: _replace_with_link(root / "tile/0/000"), "is a symbolic link"),
        (lambda root: (root / "tile/1/000.p/1").write_bytes(b"\x00" * 32), "not the tile"),
        (lambda root: (root / "checkpoint").write_bytes((root / "checkpoint").read_bytes().replace(b"\n303\n", b"\n302\n")), "does not verify"),
    ],
)
def test_tampering_with_the_files_is_caught(tmp_path: Path, tamper, message: str) -> None:  # type: ignore[no-untyped-def]
    _write(tmp_path, ENTRIES)
    tamper(tmp_path)
    with pytest.raises(LogVerificationError, match=message):
        read_log_folder(tmp_path, [SIGNER.verifier])


def test_a_re_signed_rewritten_history_is_consistent_only_with_itself(tmp_path: Path) -> None:
    # A host that rewrites entry 5 and re-signs produces a log that reads back fine on its own,
    # but its checkpoint has another root at the same size: check_extends catches it against a saved one.
    _write(tmp_path / "a", ENTRIES)
    before = read_log_folder(tmp_path / "a", [SIGNER.verifier])
    rewritten = list(ENTRIES)
    rewritten[5] = e.end_entry(time=START)
    _write(tmp_path / "b", rewritten)
    after = read_log_folder(tmp_path / "b", [SIGNER.verifier])
    with pytest.raises(LogVerificationError, match="forked"):
        check_extends(before.checkpoint, after.checkpoint, [])


def test_entry_rules() -> None:
    audit_entries(_history(2, revealed=False))
    bad_logs = {
        "not the competition": _history(2)[1:],
        "second competition": [*_history(2), _history(0)[0]],
        "second end": [*_history(2, revealed=False), e.end_entry(time=START), e.end_entry(time=START)],
        "before the end": [*_history(2, revealed=False)[:-1], _history(0)[-1]],
        "identifier key": _history(2, identifiers=b"x" * 32),
        "retracts entry 0": [*_history(2), e.retraction_entry(time=START, index=0, admin="a", reason="r")],
        "retracts a later": [*_history(2), e.retraction_entry(time=START, index=99, admin="a", reason="r")],
        "not JSON": [*_history(2), b"scores: 1"],
    }
    for what, log in bad_logs.items():
        with pytest.raises(LogVerificationError):
            audit_entries(log)
        assert what
    retracted = [*_history(2), e.retraction_entry(time=START, index=3, admin="a", reason="duplicate")]
    assert audit_entries(retracted).retracted == (3,)
    with pytest.raises(LogVerificationError, match="still standing"):
        audit_entries([*retracted, e.retraction_entry(time=START, index=3, admin="a", reason="again")])


def test_grader_log_audit(grader_cli: Callable[..., Result], tmp_path: Path) -> None:
    _write(tmp_path, ENTRIES)
    result = grader_cli("log", "audit", tmp_path, "--log-key", SIGNER.verifier.vkey)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"verified: log {ORIGIN}, 303 entries, root ")
    assert lines[1:] == ["entries: competition 1, end 1, receipt 150, report 150, reveal 1", "reveal: checked against entry 0"]
    (tmp_path / "tile/entries/000").write_bytes(b"\x00")
    result = grader_cli("log", "audit", tmp_path, "--log-key", SIGNER.verifier.vkey)
    assert result.exit_code == 1 and result.output.startswith("error: ")


def test_audit_since_an_earlier_checkpoint(grader_cli: Callable[..., Result], tmp_path: Path) -> None:
    earlier = _write(tmp_path / "early", ENTRIES[:100])
    (tmp_path / "early.checkpoint").write_bytes(earlier)
    _write(tmp_path / "now", ENTRIES)
    result = grader_cli("log", "audit", tmp_path / "now", "--log-key", SIGNER.verifier.vkey, "--since", tmp_path / "early.checkpoint")
    assert result.exit_code == 0, result.output
    # The host rewrites entry 50 and re-signs: the copy is fine by itself, but contradicts the saved checkpoint.
    rewritten = list(ENTRIES)
    rewritten[50] = e.end_entry(time=START)
    rewritten_note = _write(tmp_path / "rewritten", rewritten)
    result = grader_cli("log", "audit", tmp_path / "rewritten", "--log-key", SIGNER.verifier.vkey, "--since", tmp_path / "early.checkpoint")
    assert result.exit_code == 1
    assert "contradicts a checkpoint seen before" in result.output
    # Both signed checkpoints are printed, verbatim: the evidence.
    assert earlier.decode() in result.output and rewritten_note.decode() in result.output
    # A receipt's proof holds a checkpoint too: it works as --since.
    receipt_proof = TlogProof(3, tuple(inclusion_proof(MemoryTree.from_entries(ENTRIES[:100]), 3, 100)), earlier)
    (tmp_path / "receipt.tlog-proof").write_bytes(receipt_proof.to_bytes())
    result = grader_cli("log", "audit", tmp_path / "rewritten", "--log-key", SIGNER.verifier.vkey, "--since", tmp_path / "receipt.tlog-proof")
    assert result.exit_code == 1 and earlier.decode() in result.output
    result = grader_cli("log", "audit", tmp_path / "now", "--log-key", SIGNER.verifier.vkey, "--since", tmp_path / "receipt.tlog-proof")
    assert result.exit_code == 0, result.output
    # Same size, other root; and a log cut back.
    contents = read_log_folder(tmp_path / "rewritten", [SIGNER.verifier])
    with pytest.raises(InconsistentCheckpoints):
        check_seen(contents, _write(tmp_path / "same", ENTRIES), [SIGNER.verifier])
    with pytest.raises(InconsistentCheckpoints):
        check_seen(read_log_folder(tmp_path / "early", [SIGNER.verifier]), rewritten_note, [SIGNER.verifier])
    assert check_seen(contents, rewritten_note, [SIGNER.verifier]).size == 303


def _receipt(time: datetime) -> bytes:
    return e.receipt_entry(EntryCommitter.fresh(IDENTIFIERS), time=time, participant="p9", submission="late", upload_sha256=DIGEST)


def _rejudge(time: datetime) -> bytes:
    return e.rejudge_entry(EntryCommitter.fresh(IDENTIFIERS), time=time, participant="p0", submission="0", attempt=2, reason="again")


def test_no_receipt_after_the_end_and_nothing_but_retractions_after_the_reveal() -> None:
    ended = _history(2, revealed=False)  # the end is the last entry, at START + 1 day
    end, after = len(ended) - 1, START + timedelta(days=2)
    late_report = e.report_entry(
        EntryCommitter.fresh(IDENTIFIERS),
        time=after,
        participant="p1",
        submission="1",
        attempt=2,
        status="scored",
        payload_sha256=DIGEST,
        envelope_sha256=DIGEST,
    )
    # grading goes on after the end, for uploads received before it, and so may a rejudge
    assert audit_entries([*ended, _rejudge(after), late_report]).kinds["report"] == 3
    with pytest.raises(LogVerificationError, match=f"entry {end + 1}: a receipt after the end \\(entry {end}, "):
        audit_entries([*ended, _receipt(after)])
    late_registration = e.registration_entry(EntryCommitter.fresh(IDENTIFIERS), time=after, participant="p9", rules_sha256=DIGEST)
    with pytest.raises(LogVerificationError, match=f"entry {end + 1}: a registration after the end \\(entry {end}, .*a person registered after"):
        audit_entries([*ended, late_registration])
    late_team = e.team_entry(EntryCommitter.fresh(IDENTIFIERS), time=after, participant="p9", team="t", action="join")
    with pytest.raises(LogVerificationError, match=f"entry {end + 1}: a team after the end \\(entry {end}, .*a team membership changed after"):
        audit_entries([*ended, late_team])
    # placed before the end entry, but received after the end's time
    with pytest.raises(LogVerificationError, match=f"entry {end}: a receipt after the end \\(entry {end + 1}, "):
        audit_entries([*ended[:-1], _receipt(after), ended[-1]])
    revealed = _history(2)
    reveal = len(revealed) - 1
    for entry, kind in ((_rejudge(after), "rejudge"), (late_report, "report"), (_receipt(after), "receipt"), (e.end_entry(time=after), "end")):
        with pytest.raises(LogVerificationError, match=f"entry {reveal + 1}: a {kind} after the reveal \\(entry {reveal}\\)"):
            audit_entries([*revealed, entry])
    assert audit_entries([*revealed, e.retraction_entry(time=after, index=1, admin="a", reason="r")]).retracted == (1,)
    rewound = e.rewind_entry(time=after, published_size=len(revealed) + 1, published_root=b"r" * 32, admin="a", reason="disk lost")
    assert audit_entries([*revealed, rewound]).kinds["rewind"] == 1  # owning up to lost retractions after the reveal


def test_a_phases_end_once_before_the_competitions_end_and_its_boards_after_it() -> None:
    history = _history(2, revealed=False)
    body, end = history[:-1], history[-1]
    closed = e.phase_end_entry(time=START + timedelta(hours=1), phase="warm-up")
    boards = e.phase_board_entry(time=START + timedelta(hours=2), phase="warm-up", public_board_sha256=DIGEST, private_board_sha256=DIGEST)
    summary = audit_entries([*body, closed, boards, end])
    assert summary.kinds["phase_end"] == 1 and summary.kinds["phase_board"] == 1
    assert audit_entries([*body, closed, end, boards]).kinds["phase_board"] == 1  # its grades may finish after the competition's end
    for log, said in (
        ([*body, closed, closed, end], "a second end of phase 'warm-up'"),
        ([*body, end, closed], "a phase's end after the competition's end"),
        ([*body, boards, closed, end], "the boards of phase 'warm-up' before its end"),
        ([*body, closed, boards, boards, end], "or a second time"),
        (
            [
                *history,
                e.reveal_entry(
                    time=START,
                    partition_secret=PARTITION,
                    identifier_key=IDENTIFIERS,
                    blinding_key=None,
                    public_board_sha256=DIGEST,
                    private_board_sha256=DIGEST,
                ),
                closed,
            ],
            "a phase_end after the reveal",
        ),
    ):
        with pytest.raises(LogVerificationError, match=said):
            audit_entries(log)
