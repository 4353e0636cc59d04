"""``grader log``: offline checks of a competition's transparency log (see docs/transparency.md)."""

from __future__ import annotations

import base64
from pathlib import Path

import click

from grader.cli.log_fetch import (
    check_served_board,
    check_served_host,
    log_fetcher,
    log_verifier,
    print_evidence,
    read_bounded,
    remote_reader,
    shown,
)
from grader.cli.log_final import FinalBoardsDiffer
from grader.cli.log_seen import SeenLog, stale_line
from grader.errors import UsageError
from grader.transparency.audit import audit_entries
from grader.transparency.entries import decode_entry
from grader.transparency.errors import InconsistentCheckpoints, LogVerificationError
from grader.transparency.merkle import HASH_SIZE, leaf_hash
from grader.transparency.mirror import MAX_AUDIT_BYTES, MAX_AUDIT_ENTRIES, check_seen, folder_reader, read_log
from grader.transparency.proof import HEADER as PROOF_HEADER
from grader.transparency.proof import MAX_PROOF_BYTES, TlogProof
from grader.transparency.receipt import entry_from_file
from grader.transparency.tiles import MAX_ENTRY_BYTES

#: A receipt file is the entry as JSON text (escaped: at most six bytes a byte) and a few fields.
_MAX_ENTRY_FILE = 6 * MAX_ENTRY_BYTES + 4096


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
@click.option(
    "--entry",
    "entry_path",
    help="The logged entry: its bytes (a receipt or report entry), or the receipt file `grader submit --receipt` wrote; its leaf hash is checked.",
)
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
    kind = index = None
    if entry_path is not None:
        # the entry's bytes, or the receipt file `grader submit --receipt` wrote (its entry is JSON text inside JSON)
        logged = entry_from_file(read_bounded(entry_path, _MAX_ENTRY_FILE, "log entry"), entry_path)
        kind, index = decode_entry(logged.entry)["kind"], logged.index
        leaf = leaf_hash(logged.entry)
    else:
        try:
            leaf = bytes.fromhex(str(leaf_hex))
        except ValueError:
            leaf = b""
        if len(leaf) != HASH_SIZE:
            raise UsageError(f"--leaf-hash is {HASH_SIZE} bytes in hex")
    parsed = TlogProof.parse(read_bounded(proof, MAX_PROOF_BYTES, "proof"))
    if index is not None and index != parsed.index:
        raise LogVerificationError(f"{entry_path}: the receipt is of entry {index}, the proof of entry {parsed.index}")
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
@click.option(
    "--max-entries",
    type=click.IntRange(0),
    default=MAX_AUDIT_ENTRIES,
    show_default=True,
    help="Refuse a log whose checkpoint claims more entries, before reading any tile.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(0),
    default=MAX_AUDIT_BYTES,
    show_default=True,
    help="Refuse a log whose entries add up to more bytes (the audit holds them in memory; it writes nothing to disk).",
)
def audit(source: str, log_key: str, origin: str | None, seen: tuple[str, ...], board: bool, host: bool, max_entries: int, max_bytes: int) -> None:
    """Check a whole log: SOURCE is a folder holding its checkpoint and tiles as the server serves them, or the
    log's URL (http://HOST/log), read file by file; exit 1 on any fault.

    A checkpoint claiming more than --max-entries entries is refused before any tile is read, and
    entries adding up to more than --max-bytes are refused as they arrive; every fetch is bounded in
    size and time (GRADER_FETCH_DEADLINE_S, GRADER_FETCH_MIN_RATE, GRADER_COMMAND_DEADLINE_S).
    The checkpoint must be signed by the log key; every entry bundle must match its tile as it arrives, every
    tile the entries, and the entries the checkpoint's root; the entries must follow the log's
    rules (entry 0 the competition, one end, a reveal that opens entry 0's commitments). Each
    --since checkpoint (and, for a URL, every checkpoint of this log saved by `grader verify --log`
    or an earlier audit, kept per log key) must be one the log extends, or, for a copy older than it,
    one whose prefix the copy is (a stale mirror: exit 0, said on stdout); if not, both signed
    checkpoints are printed on stderr: evidence anyone can check with the log key.
    """
    verifier = log_verifier(log_key)
    remote = source.startswith(("http://", "https://"))
    if (board or host) and not remote:
        raise UsageError("--board and --host need the log's URL (http://HOST/log)")
    fetcher = log_fetcher()
    if remote:  # each bundle checked against its tile as it arrives; nothing written to disk
        read, where = remote_reader(fetcher, source), source.rstrip("/")
    else:
        read, where = folder_reader(Path(source)), source
        if not Path(source).is_dir():
            raise LogVerificationError(f"{source}: not a folder")
    contents = read_log(read, [verifier], where=where, origin=origin or verifier.name, max_entries=max_entries, max_bytes=max_bytes)
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
    host_line = check_served_host(fetcher, source, contents.entries) if host else None
    try:
        board_line = check_served_board(fetcher, source, contents.entries) if board else None
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
