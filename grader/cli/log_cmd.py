"""``grader log``: offline checks of a competition's transparency log (see docs/transparency.md)."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import click

from grader.cli.log_fetch import (
    check_served_board,
    check_served_host,
    log_verifier,
    mirror,
    print_evidence,
    read_bounded,
    shown,
)
from grader.cli.log_final import FinalBoardsDiffer
from grader.cli.log_seen import SeenLog, stale_line
from grader.errors import UsageError
from grader.transparency.audit import audit_entries
from grader.transparency.entries import decode_entry
from grader.transparency.errors import InconsistentCheckpoints
from grader.transparency.merkle import HASH_SIZE, leaf_hash
from grader.transparency.mirror import check_seen, read_log_folder
from grader.transparency.proof import HEADER as PROOF_HEADER
from grader.transparency.proof import MAX_PROOF_BYTES, TlogProof
from grader.transparency.tiles import MAX_ENTRY_BYTES


def _seen_checkpoint(path: str) -> bytes:
    """The signed checkpoint in a file: a checkpoint note, or the tail of a tlog-proof (a receipt's proof)."""
    data = read_bounded(path, MAX_PROOF_BYTES, "checkpoint")
    return TlogProof.parse(data).checkpoint if data.startswith(PROOF_HEADER.encode()) else data


def print_differing(error: FinalBoardsDiffer, note: bytes) -> None:
    """On stderr: the signed checkpoint the audit checked (whose reveal names the final boards) and every differing row."""
    click.echo("the log's signed checkpoint the audit checked:", err=True)
    click.echo(shown(note), err=True, nl=False)
    for row in error.rows:
        click.echo(f"differs: {row.line()}", err=True)


@click.group("log")
def log() -> None:
    """Check a competition's transparency log offline."""


@log.command("verify-proof")
@click.argument("proof")
@click.option("--log-key", "log_key", required=True, help="The log's verifier key (name+id+key), or a file holding it.")
@click.option("--entry", "entry_path", help="The logged entry's bytes (a receipt or report entry); its leaf hash is checked.")
@click.option("--leaf-hash", "leaf_hex", help="The entry's leaf hash in hex, instead of --entry.")
@click.option("--origin", help="The log's origin; by default the log key's name.")
def verify_proof(proof: str, log_key: str, entry_path: str | None, leaf_hex: str | None, origin: str | None) -> None:
    """Check that an entry is in the log: PROOF is a C2SP tlog-proof file; exit 1 if any check fails.

    The checkpoint in the proof must be signed by the log key and name the expected origin;
    the inclusion proof must lead from the entry's leaf hash to the checkpoint's root.
    """
    if (entry_path is None) == (leaf_hex is None):
        raise UsageError("give exactly one of --entry and --leaf-hash")
    verifier = log_verifier(log_key)
    kind = None
    if entry_path is not None:
        entry = read_bounded(entry_path, MAX_ENTRY_BYTES, "log entry")
        kind = decode_entry(entry)["kind"]
        leaf = leaf_hash(entry)
    else:
        try:
            leaf = bytes.fromhex(str(leaf_hex))
        except ValueError:
            leaf = b""
        if len(leaf) != HASH_SIZE:
            raise UsageError(f"--leaf-hash is {HASH_SIZE} bytes in hex")
    parsed = TlogProof.parse(read_bounded(proof, MAX_PROOF_BYTES, "proof"))
    checkpoint = parsed.verify(leaf, [verifier], origin=origin or verifier.name)
    what = f"{kind} entry" if kind else "entry"
    root = base64.b64encode(checkpoint.root_hash).decode("ascii")
    click.echo(f"verified: {what} {parsed.index} is in log {checkpoint.origin} (tree size {checkpoint.size}, root {root})")


@log.command("audit")
@click.argument("source")
@click.option("--log-key", "log_key", required=True, help="The log's verifier key (name+id+key), or a file holding it.")
@click.option("--origin", help="The log's origin; by default the log key's name.")
@click.option(
    "--since",
    "seen",
    multiple=True,
    help="A checkpoint of this log saved earlier, or a .tlog-proof holding one (repeatable): the log must extend it.",
)
@click.option(
    "--board",
    is_flag=True,
    help="With a URL (http://HOST/log): also check the boards (HOST/api/v1/leaderboard): before the end every public row "
    "against its logged report; after the reveal the final boards against the reveal's digests, and every final row's "
    "score and place recomputed from its logged, host-signed full report.",
)
@click.option(
    "--host",
    is_flag=True,
    help="With a URL (http://HOST/log): also check entry 0 against what the host publishes: the partition commitment and "
    "data digests (HOST/api/v1/partition) and the host key (HOST/host-key.pub).",
)
def audit(source: str, log_key: str, origin: str | None, seen: tuple[str, ...], board: bool, host: bool) -> None:
    """Check a whole log: SOURCE is a folder holding its checkpoint and tiles as the server serves them, or the
    log's URL (http://HOST/log), downloaded first; exit 1 on any fault.

    The checkpoint must be signed by the log key; every entry bundle must match its tile, every
    tile the entries, and the entries the checkpoint's root; the entries must follow the log's
    rules (entry 0 the competition, one end, a reveal that opens entry 0's commitments). Each
    --since checkpoint (and, for a URL, every checkpoint of this log saved by `grader verify --log`
    or an earlier audit, kept per log key) must be one the log extends, or, for a copy older than it,
    one whose prefix the copy is (a stale mirror: exit 0, said on stdout); if not, both signed
    checkpoints are printed on stderr: evidence anyone can check with the log key.
    """
    verifier = log_verifier(log_key)
    remote = source.startswith(("http://", "https://"))
    with tempfile.TemporaryDirectory(prefix="grader-log-") as scratch:
        folder = scratch if remote else source
        if remote:
            mirror(source, Path(scratch), verifier)
        contents = read_log_folder(folder, [verifier], origin=origin or verifier.name)
    store = SeenLog(verifier)
    earlier = [(path, _seen_checkpoint(path)) for path in seen]
    if remote:
        earlier += [("saved before", note) for note in store.notes()]
    stale = None
    for label, note in earlier:
        try:
            extend, older = store.split_newer([note], contents.note, contents.checkpoint)  # a newer one: the other way round
            stale = older or stale
            for checked in extend:
                check_seen(contents, checked, [verifier])
        except InconsistentCheckpoints as error:
            print_evidence(error, label, source)
            raise
    summary = audit_entries(contents.entries)
    if (board or host) and not remote:
        raise UsageError("--board and --host need the log's URL (http://HOST/log)")
    host_line = check_served_host(source, contents.entries) if host else None
    try:
        board_line = check_served_board(source, contents.entries) if board else None
    except FinalBoardsDiffer as error:
        print_differing(error, contents.note)
        raise
    if remote and stale is None:  # a stale copy's checkpoint adds nothing to what was seen
        store.save(contents.note, contents.checkpoint)
        store.keep_leaves([leaf_hash(entry) for entry in contents.entries], contents.checkpoint)
    checkpoint = contents.checkpoint
    root = base64.b64encode(checkpoint.root_hash).decode("ascii")
    click.echo(f"verified: log {checkpoint.origin}, {checkpoint.size} entries, root {root}")
    if stale is not None:
        click.echo(stale_line(stale))
    click.echo("entries: " + ", ".join(f"{kind} {count}" for kind, count in summary.kinds.items()))
    if summary.retracted:
        click.echo("retracted: " + ", ".join(str(index) for index in summary.retracted))
    click.echo("reveal: checked against entry 0" if summary.revealed else "reveal: not yet")
    for line in (host_line, board_line):
        if line is not None:
            click.echo(line)


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(log)
