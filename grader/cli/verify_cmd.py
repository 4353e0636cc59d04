"""``grader verify``: check a signed report and show what it verifiably says; with ``--log-key``, that it is logged."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from grader import jsonio
from grader.cli.log_fetch import (
    check_consistent,
    fetch_checkpoint,
    keep_served_leaves,
    log_fetcher,
    log_verifier,
    print_evidence,
    read_bounded,
)
from grader.cli.log_seen import SeenLog, Stale, stale_line
from grader.errors import UsageError, VerificationError
from grader.reports.keys import keyid, load_public_key
from grader.reports.model import report_json
from grader.reports.summary import format_summary
from grader.reports.verify import read_envelope_file, signed_predicate_type, verify_envelope
from grader.text import MAX_ERROR_LINE, bounded
from grader.transparency.entries import decode_entry
from grader.transparency.errors import InconsistentCheckpoints, LogVerificationError
from grader.transparency.merkle import leaf_hash
from grader.transparency.proof import MAX_PROOF_BYTES, SUFFIX, TlogProof

_MAX_ENVELOPE = 64 << 20


@dataclass(frozen=True)
class Logged:
    """What the log checks found: the report's entry, the proof's checkpoint, and the newest one fetched (with --log)."""

    index: int
    origin: str
    size: int
    newest: int | None = None
    seen: int = 0
    #: the served checkpoint is older than one seen before, and a prefix of it (a stale mirror)
    stale: Stale | None = None


def check_logged(report: str, proof_path: str, log_key: str, log_url: str | None) -> Logged:
    """The report's tlog-proof carries its report entry (``extra``): the entry must name this envelope and the proof
    must lead to a checkpoint signed by the log key; with ``log_url``, the newest checkpoint must extend the proof's
    and every one seen before (then it is saved)."""
    verifier = log_verifier(log_key)
    envelope = read_bounded(report, _MAX_ENVELOPE, "report")
    proof = TlogProof.parse(read_bounded(proof_path, MAX_PROOF_BYTES, "proof"))
    if proof.extra is None:
        raise LogVerificationError(f"{proof_path}: the proof carries no log entry (its extra line)")
    entry = decode_entry(proof.extra)
    if entry["kind"] != "report" or entry["envelope_sha256"] != hashlib.sha256(envelope).hexdigest():
        raise LogVerificationError(f"{proof_path}: the logged entry is not the entry of this report (another envelope)")
    checkpoint = proof.verify(leaf_hash(proof.extra), [verifier], origin=verifier.name)
    if log_url is None:
        return Logged(proof.index, checkpoint.origin, checkpoint.size)
    fetcher = log_fetcher()
    note, newest = fetch_checkpoint(fetcher, log_url, verifier)
    store = SeenLog(verifier)
    earlier = [proof.checkpoint, *store.notes()]
    try:
        extend, stale = store.split_newer(earlier, note, newest)  # an older copy is checked the other way round
        check_consistent(fetcher, log_url, extend, note, newest, verifier)
    except InconsistentCheckpoints as error:
        print_evidence(error, "the proof's, or one saved before", log_url)
        raise
    store.save(proof.checkpoint, checkpoint)
    if stale is None:  # a stale copy's checkpoint adds nothing to what was seen
        store.save(note, newest)
        keep_served_leaves(fetcher, log_url, store, newest)
    return Logged(proof.index, checkpoint.origin, checkpoint.size, newest.size, len(earlier) - 1, stale)


@click.command("verify")
# Plain strings, not click.Path(exists=True): an unreadable report is a
# verification failure (exit 1, one line), not a usage error.
@click.argument("report")
@click.option("--key", "key_path", required=True, help="Public key (grader.pub) the report must be signed with.")
@click.option("--json", "as_json", is_flag=True, help="Print the verified report as JSON instead of a summary.")
@click.option("--log-key", "log_key", help="The transparency log's verifier key (or a file holding it): also check the report is logged.")
@click.option("--proof", "proof_path", help=f"The report's inclusion proof (default: REPORT{SUFFIX}, as `grader submit` saves it).")
@click.option("--log", "log_url", help="The log's URL (http://HOST/log): also check its newest checkpoint extends every one seen.")
def verify(report: str, key_path: str, as_json: bool, log_key: str | None, proof_path: str | None, log_url: str | None) -> None:
    """Verify the signed report REPORT (a DSSE envelope: a grading report, or a lint report); exit 1 if any check fails.

    With --log-key, the report's tlog-proof must show its entry in the log (offline); with --log,
    the log's newest checkpoint must be consistent with the proof's and with every checkpoint saved
    before (kept per log key in $XDG_STATE_HOME/grader/log-checkpoints); a copy older than one seen
    before is a stale mirror (exit 0) when it is a prefix of it; on a contradiction both signed
    checkpoints are printed on stderr. Nothing is printed on stdout unless every check passed.
    """
    if log_key is None and (proof_path or log_url):
        raise UsageError("--proof and --log need --log-key")
    public_key = load_public_key(key_path)
    envelope = read_envelope_file(report)
    from grader.integrity.signing import PREDICATE_TYPE as LINT_PREDICATE_TYPE

    if signed_predicate_type(envelope, public_key, source=report) == LINT_PREDICATE_TYPE:
        _verify_lint(report, envelope, public_key, as_json=as_json, log_key=log_key)
        return
    verified = verify_envelope(envelope, public_key, source=report)
    logged = None if log_key is None else check_logged(report, proof_path or report + SUFFIX, log_key, log_url)
    if as_json:
        click.echo(report_json(verified.report).decode("utf-8"), nl=False)
        return
    click.echo(format_summary(verified))
    if logged is not None:
        click.echo(f"logged: report entry {logged.index} in log {logged.origin} (checkpoint of {logged.size} entries)")
        if logged.stale is not None:
            click.echo(f"log: {stale_line(logged.stale)}")
        elif logged.newest is not None:
            click.echo(f"log: its newest checkpoint ({logged.newest} entries) extends the proof's and {logged.seen} seen before")


def _verify_lint(report: str, envelope: bytes, public_key: Ed25519PublicKey, *, as_json: bool, log_key: str | None) -> None:
    """A signed lint report (``grader lint --out --key``): checked whole, then shown as what it is, never as a grade."""
    from grader.integrity.report import format_table
    from grader.integrity.signing import PREDICATE_TYPE as LINT_PREDICATE_TYPE
    from grader.integrity.signing import verify_lint_envelope

    if log_key is not None:
        raise UsageError(f"{report}: a lint report is in no transparency log; verify it without --log-key")
    try:
        lint = verify_lint_envelope(envelope, public_key)
    except VerificationError as error:
        raise VerificationError(f"{report}: {error}") from None
    if as_json:
        click.echo(jsonio.dumps(lint, sort_keys=True, indent=2, ensure_ascii=True))
        return
    subject = lint["subject"]
    click.echo(f"verified: signed by key {keyid(public_key)}")
    click.echo(f"kind: a lint report ({LINT_PREDICATE_TYPE}): findings about the data, not a grade")
    click.echo(f"subject: {bounded(str(subject['name']), MAX_ERROR_LINE)} (linted data) sha256:{subject['digest']['sha256']}")
    click.echo(format_table(lint), nl=False)


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(verify)
