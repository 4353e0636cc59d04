"""The checkpoints a user has seen are kept per log key (grader/cli/log_seen.py), and an older copy is checked the other way.

Logs are served over a real socket on 127.0.0.1 as static C2SP tlog-tiles files (what `grader serve` serves, or a
mirror made with a plain HTTP client): two competitions named ``mini-demo`` on two servers, with two log keys, are
both checked one after the other by `grader log audit URL` and `grader verify --log URL`; a mirror one entry behind a
log already seen is a stale mirror (exit 0, said on stdout), checked against the kept leaf hashes; a copy of that size
with another last entry is a fork (exit 1, both signed checkpoints on stderr); the earlier layout, one folder per
origin, is migrated to the folder of the key that signed each checkpoint.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.cli.log_seen import SeenLog
from grader.cli.main import cli
from grader.reports.example import example_report
from grader.reports.signing import write_signed_report
from grader.transparency import entries
from grader.transparency.checkpoint import Checkpoint, sign_checkpoint
from grader.transparency.commitments import EntryCommitter, new_identifier_key
from grader.transparency.merkle import MemoryTree, inclusion_proof
from grader.transparency.mirror import write_log_folder
from grader.transparency.note import NoteSigner
from grader.transparency.proof import TlogProof

ORIGIN = "grader-log/mini-demo"
TIME = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SIGNATURE_LINE = f"\u2014 {ORIGIN} "

pytestmark = pytest.mark.slow  # static log servers on loopback sockets


@dataclass
class Log:
    """A log's key and entries; entry 1 is the report entry of ``report`` (its proof beside it)."""

    signer: NoteSigner
    entries: list[bytes]
    report: Path
    host_key: Path

    @property
    def vkey(self) -> str:
        return self.signer.verifier.vkey

    def note(self, size: int, entries: list[bytes] | None = None) -> bytes:
        """The signed checkpoint of the first ``size`` entries (of ``entries``, by default the log's)."""
        return sign_checkpoint(Checkpoint(ORIGIN, size, MemoryTree.from_entries((entries or self.entries)[:size]).root()), self.signer)

    def folder(self, root: Path, size: int, entries: list[bytes] | None = None) -> Path:
        """The log's first ``size`` entries as served files, under ``root/log``."""
        chosen = (entries or self.entries)[:size]
        write_log_folder(root / "log", chosen, self.note(size, entries))
        return root


def make_log(tmp_path: Path, name: str, keys: tuple[Path, Path]) -> Log:
    """A log of ``ORIGIN`` under a fresh key: entry 0, a report entry of a signed report, and three more entries."""
    signer = NoteSigner(ORIGIN, Ed25519PrivateKey.generate())
    envelope, _plain = write_signed_report(example_report(), keys[0], tmp_path / name / "report.dsse.json")
    digest = hashlib.sha256(envelope.read_bytes()).hexdigest()
    first = entries.competition_entry(
        time=TIME,
        origin=ORIGIN,
        competition_sha256="1" * 64,
        partition_commitment="2" * 64,
        identifier_commitment="3" * 64,
        blinding_commitment=None,
        data_digests={"mini/test": "4" * 64},
        host_key_id="5" * 64,
        log_key_id=hashlib.sha256(signer.verifier.public_key.public_bytes_raw()).hexdigest(),
    )
    committer = EntryCommitter.fresh(new_identifier_key())
    report = entries.report_entry(
        committer, time=TIME, participant="alice", submission="s1", attempt=1, status="scored", payload_sha256="6" * 64, envelope_sha256=digest
    )
    boards = [entries.board_entry(time=TIME, part="public", board_sha256=f"{index:064x}") for index in range(3)]
    log = Log(signer, [first, report, *boards], envelope, keys[1])
    tree = MemoryTree.from_entries(log.entries[:2])
    proof = TlogProof(1, tuple(inclusion_proof(tree, 1, 2)), log.note(2), extra=report)
    Path(f"{envelope}.tlog-proof").write_bytes(proof.to_bytes())
    return log


@pytest.fixture()
def keys(tmp_path: Path) -> tuple[Path, Path]:
    result = CliRunner().invoke(cli, ["keygen", "--out", str(tmp_path / "keys")])
    assert result.exit_code == 0, result.output
    return tmp_path / "keys" / "grader.key", tmp_path / "keys" / "grader.pub"


@pytest.fixture()
def serve() -> Iterator[Callable[[Path], str]]:
    """Serve a folder's files over HTTP on 127.0.0.1 (a static log server, or a mirror); its URL."""
    servers: list[http.server.ThreadingHTTPServer] = []

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    def start(folder: Path) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(folder)))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/log"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One user's state folder (XDG_STATE_HOME) for every command of a test."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "user-state"))
    return tmp_path / "user-state"


def grader(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def audit(url: str, log: Log) -> Result:
    return grader("log", "audit", url, "--log-key", log.vkey)


def verify(url: str, log: Log) -> Result:
    return grader("verify", log.report, "--key", log.host_key, "--log-key", log.vkey, "--log", url)


def test_two_logs_of_one_name_with_two_keys_are_both_checked(
    tmp_path: Path, keys: tuple[Path, Path], serve: Callable[[Path], str], user: Path
) -> None:
    first, second = make_log(tmp_path, "first", keys), make_log(tmp_path, "second", keys)
    one, two = serve(first.folder(tmp_path / "one", 5)), serve(second.folder(tmp_path / "two", 4))
    for url, log in ((one, first), (two, second), (one, first)):
        for result in (audit(url, log), verify(url, log)):
            assert result.exit_code == 0, (url, result.stdout, result.stderr)
    assert (
        "log: its newest checkpoint (4 entries) extends the proof's and 2 seen before" in verify(two, second).stdout
    )  # its own two, none of the other log's
    assert SeenLog(first.signer.verifier).folder != SeenLog(second.signer.verifier).folder
    assert len(SeenLog(first.signer.verifier).leaves()) == 5 and len(SeenLog(second.signer.verifier).leaves()) == 4


def test_a_mirror_one_entry_behind_is_a_stale_mirror_and_a_fork_still_prints_both(
    tmp_path: Path, keys: tuple[Path, Path], serve: Callable[[Path], str], user: Path
) -> None:
    log = make_log(tmp_path, "log", keys)
    primary, mirror = serve(log.folder(tmp_path / "primary", 5)), serve(log.folder(tmp_path / "mirror", 4))
    assert verify(primary, log).exit_code == 0  # seen: 5 entries, and their leaf hashes (from the level-0 tiles)
    for result in (audit(mirror, log), verify(mirror, log)):
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert "stale mirror: its checkpoint (4 entries) is older than one seen before (5 entries), and a prefix of it" in result.stdout
        assert SIGNATURE_LINE not in result.stderr
    # A copy of 4 entries whose last entry is another: not a prefix of what was seen, a fork, both checkpoints printed.
    forked = [*log.entries[:3], entries.board_entry(time=TIME, part="private", board_sha256="f" * 64)]
    fork = serve(log.folder(tmp_path / "fork", 4, forked))
    for result in (audit(fork, log), verify(fork, log)):
        assert result.exit_code == 1 and result.stdout == "", result.stdout
        assert "the log forked: its checkpoint of 4 entries is not a prefix of the one of 5 seen before" in result.stderr
        assert result.stderr.count(SIGNATURE_LINE) == 2, result.stderr
    assert audit(primary, log).exit_code == 0  # the log itself is unchanged by all this


def test_an_older_copy_without_kept_hashes_is_not_called_stale(
    tmp_path: Path, keys: tuple[Path, Path], serve: Callable[[Path], str], user: Path
) -> None:
    log = make_log(tmp_path, "log", keys)
    mirror = serve(log.folder(tmp_path / "mirror", 4))
    newer = tmp_path / "newer.checkpoint"
    newer.write_bytes(log.note(5))  # a checkpoint kept from elsewhere, whose tree this user never read
    result = grader("log", "audit", mirror, "--log-key", log.vkey, "--since", newer)
    assert result.exit_code == 1 and result.stderr.count(SIGNATURE_LINE) == 2
    assert "keeps no hashes of that tree" in result.stderr


def test_the_earlier_layout_per_origin_is_migrated_per_key(tmp_path: Path, keys: tuple[Path, Path], serve: Callable[[Path], str], user: Path) -> None:
    first, second = make_log(tmp_path, "first", keys), make_log(tmp_path, "second", keys)
    legacy = user / "grader" / "log-checkpoints" / hashlib.sha256(ORIGIN.encode()).hexdigest()[:32]
    legacy.mkdir(parents=True)
    (legacy / "00000000000000000003-a.checkpoint").write_bytes(first.note(3))
    (legacy / "00000000000000000002-b.checkpoint").write_bytes(second.note(2))
    assert audit(serve(second.folder(tmp_path / "two", 4)), second).exit_code == 0  # before: "not signed by a trusted key"
    assert [path.name for path in legacy.iterdir()] == ["00000000000000000003-a.checkpoint"]  # another log's: left
    assert (SeenLog(second.signer.verifier).folder / "00000000000000000002-b.checkpoint").exists()
    assert audit(serve(first.folder(tmp_path / "one", 5)), first).exit_code == 0
    assert not list(legacy.iterdir()) and len(SeenLog(first.signer.verifier).notes()) == 2
