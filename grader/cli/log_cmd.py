"""``grader log``: offline checks of a competition's transparency log (see docs/transparency.md)."""

from __future__ import annotations

import base64
import os

import click

from grader.errors import KeyFileError, UsageError
from grader.text import escape_control
from grader.translog.audit import audit_entries
from grader.translog.entries import decode_entry
from grader.translog.errors import InconsistentCheckpoints, LogVerificationError
from grader.translog.merkle import HASH_SIZE, leaf_hash
from grader.translog.mirror import check_seen, read_log_folder
from grader.translog.note import NoteVerifier
from grader.translog.proof import HEADER as PROOF_HEADER
from grader.translog.proof import MAX_PROOF_BYTES, TlogProof
from grader.translog.tiles import MAX_ENTRY_BYTES

_MAX_VKEY_FILE = 4096


def _read(path: str, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of ``path``; an unreadable or larger file fails verification (exit 1, one line)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise LogVerificationError(f"{path}: cannot read the {what}: {error.strerror or error}") from None
    if len(data) > limit:
        raise LogVerificationError(f"{path}: the {what} is larger than {limit} bytes")
    return data


def _log_key(value: str) -> NoteVerifier:
    """A log key given as a file holding its verifier key, or as the verifier key itself."""
    text, where = value, None
    if os.path.exists(value):
        where = value
        try:
            with open(value, "rb") as handle:
                text = handle.read(_MAX_VKEY_FILE + 1).decode("utf-8", "replace")
        except OSError as error:
            raise KeyFileError(f"cannot read the log key: {error.strerror or error}", path=value) from None
    try:
        return NoteVerifier.from_vkey(text)
    except LogVerificationError as error:
        raise KeyFileError(f"not a log verifier key (<name>+<hex id>+<base64 key>): {error}", path=where) from None


def _shown(note: bytes) -> str:
    """A signed note for a terminal: each line escaped (no control or bidi character reaches it), newlines kept."""
    lines = note.decode("utf-8", "replace").split("\n")
    return "\n".join(escape_control(line) for line in lines)


def _seen_checkpoint(path: str) -> bytes:
    """The signed checkpoint in a file: a checkpoint note, or the tail of a tlog-proof (a receipt's proof)."""
    data = _read(path, MAX_PROOF_BYTES, "checkpoint")
    return TlogProof.parse(data).checkpoint if data.startswith(PROOF_HEADER.encode()) else data


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
    verifier = _log_key(log_key)
    kind = None
    if entry_path is not None:
        entry = _read(entry_path, MAX_ENTRY_BYTES, "log entry")
        kind = decode_entry(entry)["kind"]
        leaf = leaf_hash(entry)
    else:
        try:
            leaf = bytes.fromhex(str(leaf_hex))
        except ValueError:
            leaf = b""
        if len(leaf) != HASH_SIZE:
            raise UsageError(f"--leaf-hash is {HASH_SIZE} bytes in hex")
    parsed = TlogProof.parse(_read(proof, MAX_PROOF_BYTES, "proof"))
    checkpoint = parsed.verify(leaf, [verifier], origin=origin or verifier.name)
    what = f"{kind} entry" if kind else "entry"
    root = base64.b64encode(checkpoint.root_hash).decode("ascii")
    click.echo(f"verified: {what} {parsed.index} is in log {checkpoint.origin} (tree size {checkpoint.size}, root {root})")


@log.command("audit")
@click.argument("folder")
@click.option("--log-key", "log_key", required=True, help="The log's verifier key (name+id+key), or a file holding it.")
@click.option("--origin", help="The log's origin; by default the log key's name.")
@click.option(
    "--since",
    "seen",
    multiple=True,
    help="A checkpoint of this log saved earlier, or a .tlog-proof holding one (repeatable): the log must extend it.",
)
def audit(folder: str, log_key: str, origin: str | None, seen: tuple[str, ...]) -> None:
    """Check a copy of a log: FOLDER holds its checkpoint and tiles as the server serves them; exit 1 on any fault.

    The checkpoint must be signed by the log key; every entry bundle must match its tile, every
    tile the entries, and the entries the checkpoint's root; the entries must follow the log's
    rules (entry 0 the competition, one end, a reveal that opens entry 0's commitments). Each
    --since checkpoint must be one the log extends; if not, both signed checkpoints are printed
    on stderr: evidence anyone can check with the log key.
    """
    verifier = _log_key(log_key)
    contents = read_log_folder(folder, [verifier], origin=origin or verifier.name)
    for path in seen:
        try:
            check_seen(contents, _seen_checkpoint(path), [verifier])
        except InconsistentCheckpoints as error:
            click.echo(f"checkpoint seen before ({path}):", err=True)
            click.echo(_shown(error.seen), err=True, nl=False)
            click.echo(f"checkpoint now ({folder}):", err=True)
            click.echo(_shown(error.new), err=True, nl=False)
            raise
    summary = audit_entries(contents.entries)
    checkpoint = contents.checkpoint
    root = base64.b64encode(checkpoint.root_hash).decode("ascii")
    click.echo(f"verified: log {checkpoint.origin}, {checkpoint.size} entries, root {root}")
    click.echo("entries: " + ", ".join(f"{kind} {count}" for kind, count in summary.kinds.items()))
    if summary.retracted:
        click.echo("retracted: " + ", ".join(str(index) for index in summary.retracted))
    click.echo("reveal: checked against entry 0" if summary.revealed else "reveal: not yet")


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(log)
