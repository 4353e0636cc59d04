"""What an import checks of a competition before it is recorded: its log and its reports, read back as the new server
will read them (its database, its folder), so that a competition that would not audit is never served.

- the log: the entries are 0, 1, 2, … with no gap, they keep the log's rules (:func:`grader.transparency.audit.audit_entries`:
  entry 0 the competition's commitment, nothing but retractions after the reveal …), entry 0 names this competition's
  origin, and the published checkpoint (``log/checkpoint``, signed by the log key in ``keys/log.vkey``) is a prefix of
  them with the same root hash: what ``grader log audit`` will find;
- the reports: every signed envelope under ``results/`` verifies under the competition's host key (``keys/grader.pub``),
  and every result row names one that exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from grader.errors import GraderError
from grader.hosting.db.models import LogEntry, Result
from grader.hosting.db.session import Database
from grader.hosting.directory.bundle_format import BundleError
from grader.hosting.keyring.files import key_files
from grader.hosting.keyring.log_key import log_origin
from grader.hosting.transparency.host_log import LOG_DIR
from grader.reports.keys import load_public_key
from grader.reports.verify import verify_report_file
from grader.transparency.audit import audit_entries
from grader.transparency.checkpoint import open_checkpoint
from grader.transparency.entries import decode_entry
from grader.transparency.merkle import MemoryTree
from grader.transparency.note import MAX_NOTE_BYTES, NoteVerifier

CHECKPOINT_FILE = "checkpoint"
#: The verifier key file is a line: bounded all the same.
MAX_VKEY_BYTES = 4096


@dataclass(frozen=True)
class Verified:
    """What the checks found: the log's entries, the size of its published checkpoint, the reports verified."""

    entries: int
    checkpoint_size: int
    reports: int


def verify_imported(db: Database, folder: Path, name: str, stored_folder: str) -> Verified:
    """Check the competition ``name`` whose rows are in ``db`` and files in ``folder`` (the rows' paths name
    ``stored_folder``, where ``folder`` will be renamed); :class:`BundleError` naming the first problem."""
    with db.session() as session:
        indexes_entries = session.execute(select(LogEntry.index, LogEntry.entry).order_by(LogEntry.index)).all()
        envelopes = [str(path) for (path,) in session.execute(select(Result.envelope_path).where(Result.envelope_path.is_not(None))).all()]
    entries = [bytes(entry) for _index, entry in indexes_entries]
    if [index for index, _entry in indexes_entries] != list(range(len(entries))):
        raise BundleError(f"competition {name!r}: its log entries are not numbered 0 to {len(entries) - 1} without a gap")
    try:
        audit_entries(entries)
        origin = decode_entry(entries[0]).get("origin")
        if origin != log_origin(name):
            raise BundleError(f"competition {name!r}: its log is {origin!r}, not {log_origin(name)!r} (the rows of another competition)")
        keys = key_files(folder)
        verifier = NoteVerifier.from_vkey(_read(keys.log_verifier, MAX_VKEY_BYTES).decode("ascii"))
        checkpoint = open_checkpoint(_read(folder / LOG_DIR / CHECKPOINT_FILE, MAX_NOTE_BYTES), [verifier], origin=log_origin(name))
    except (GraderError, UnicodeDecodeError) as error:
        raise BundleError(f"competition {name!r}: its log does not audit: {error}") from None
    if checkpoint.size > len(entries) or MemoryTree.from_entries(entries).root(checkpoint.size) != checkpoint.root_hash:
        raise BundleError(f"competition {name!r}: its rows do not hold the log its signed checkpoint publishes ({checkpoint.size} entries)")
    host_key = load_public_key(key_files(folder).host_public)
    named = {folder / Path(path).relative_to(stored_folder) for path in envelopes if Path(path).is_relative_to(stored_folder)}
    if len(named) != len(set(envelopes)):
        raise BundleError(f"competition {name!r}: a result names a report outside its folder")
    found = set((folder / "results").rglob("*.dsse.json")) if (folder / "results").is_dir() else set()
    if missing := sorted(named - found):
        raise BundleError(f"competition {name!r}: result report {missing[0]} is not in the bundle")
    for path in sorted(found):
        try:
            verify_report_file(path, host_key)
        except GraderError as error:
            raise BundleError(f"competition {name!r}: a report does not verify under its host key: {error}") from None
    return Verified(len(entries), checkpoint.size, len(found))


def _read(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise BundleError(f"{path}: cannot read it: {error.strerror or error}") from None
    if len(data) > limit:
        raise BundleError(f"{path}: larger than {limit} bytes")
    return data
