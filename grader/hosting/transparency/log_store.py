"""The competition's transparency log in the database: appending, publishing, opening at start, a deliberate rewind.

Every event docs/transparency.md lists appends its entry (:mod:`grader.transparency.entries`;
:mod:`grader.hosting.transparency.log_events`) through
:func:`append_entry`, inside the transaction of the event, so the entry and the event commit or
roll back together. Appends are serialised across processes by an UPDATE of the ``log_head``
settings row (SQLite's write lock, PostgreSQL's row lock) before the next index is read. After
a commit that appended, the session's ``after_commit`` hook reads the new entries and publishes a
signed checkpoint (:meth:`grader.hosting.transparency.host_log.HostLog.publish`, compare-and-swap on the
checkpoint file). What is served of the log: :mod:`grader.hosting.transparency.log_reads`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, func, select, update
from sqlalchemy.orm import Session

from grader import __version__, jsonio
from grader.hosting.clock import utcnow
from grader.hosting.db.models import LogEntry, Setting
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.transparency.host_log import LOG_DIR, HostLog, LogStateError, identifier_key
from grader.transparency import entries
from grader.transparency.audit import AFTER_THE_REVEAL
from grader.transparency.checkpoint import Checkpoint, open_checkpoint
from grader.transparency.commitments import key_commitment
from grader.transparency.errors import LogVerificationError
from grader.transparency.note import NoteVerifier, sign_note

log = logging.getLogger("grader.hosting.transparency")

#: The settings row every append locks first (its value is unused).
HEAD_SETTING = "log_head"
_HOOKED = "grader_log_publish"


def open_host_log(root: Path) -> HostLog | None:
    """The log of the state folder ``root`` for a command outside the server (``grader admin``): its origin is the name
    in ``keys/log.vkey``; None when no server has started there yet (no log key)."""
    # Here, not at the top: `grader admin list` and the like import this module and need neither (nor their imports).
    from grader.hosting.keyring.files import key_files
    from grader.hosting.keyring.log_key import ensure_log_key
    from grader.hosting.keyring.partition_secret import load_partition_secret

    keys = key_files(root)
    try:
        vkey = keys.log_verifier.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise HostingError(f"{keys.log_verifier}: cannot read the log's verifier key: {error}") from None
    try:
        origin = NoteVerifier.from_vkey(vkey).name
    except LogVerificationError as error:
        raise HostingError(f"{keys.log_verifier}: not a verifier key: {error}") from None
    return HostLog(ensure_log_key(keys.folder, origin), identifier_key(load_partition_secret(keys.folder)), root / LOG_DIR)


def lock_head(session: Session) -> None:
    """Serialise appends (and checks before them) across processes until ``session`` ends."""
    locked = session.execute(update(Setting).where(Setting.key == HEAD_SETTING).values(value=Setting.value))
    if not getattr(locked, "rowcount", 1):
        session.add(Setting(key=HEAD_SETTING, value=""))
        session.flush()


class LogClosedError(HostingError):
    """The log holds the reveal: from then on it takes nothing but retractions (the results are final)."""


def reveal_index(session: Session) -> int | None:
    """The index of the log's ``reveal`` entry, or None before the reveal."""
    return session.scalar(select(LogEntry.index).where(LogEntry.kind == "reveal").limit(1))


def append_entry(session: Session, host_log: HostLog, entry: bytes, *, submission_id: str | None = None, envelope_sha256: str | None = None) -> int:
    """Append ``entry`` (canonical bytes) in ``session``'s transaction; return its index. Publishes after the commit.

    After the reveal only a retraction (or a rewind, after a disaster) is appended (:class:`LogClosedError`, which rolls the event back with it): the
    reveal published the keys and the final boards' digests, so a grade, a rejudge or a receipt after it would change
    results everyone may already have checked, and the audit refuses any such entry.
    """
    lock_head(session)
    kind = str(jsonio.loads(entry)["kind"])
    if kind not in AFTER_THE_REVEAL:
        revealed = reveal_index(session)
        if revealed is not None:
            raise LogClosedError(
                f"the log holds the reveal (entry {revealed}): the competition's results are final and its log takes nothing but "
                f"retractions, so this {kind} is refused (open a new competition to grade more)"
            )
    last = session.scalar(select(func.max(LogEntry.index)))
    index = 0 if last is None else last + 1
    session.add(LogEntry(index=index, entry=entry, kind=kind, submission_id=submission_id, envelope_sha256=envelope_sha256, created_at=utcnow()))
    session.flush()
    if not session.info.get(_HOOKED):
        session.info[_HOOKED] = True
        bind = session.get_bind()
        assert isinstance(bind, Engine)
        event.listen(session, "after_commit", lambda _session: _publish_quietly(bind, host_log), once=True)
    return index


def _publish_quietly(engine: Engine, host_log: HostLog) -> None:
    """After a commit: publish; a failure is logged (the next publish catches up, and a refusal is the point)."""
    try:
        with Session(engine) as session:
            publish_from(session, host_log)
    except Exception:
        log.exception("transparency log: could not publish a checkpoint after a commit")


def refresh(session: Session, host_log: HostLog) -> None:
    """Read the entries appended since the last read into the in-memory tree (an entry is never rewritten)."""
    with host_log.lock:
        rows = session.execute(select(LogEntry.index, LogEntry.entry).where(LogEntry.index >= host_log.tree.size).order_by(LogEntry.index)).all()
        for index, data in rows:
            if index != host_log.tree.size:
                raise LogStateError(f"the database's log skips from entry {host_log.tree.size - 1} to entry {index} (a row was deleted)")
            host_log.tree.append(bytes(data))


def publish_from(session: Session, host_log: HostLog) -> tuple[bytes, Checkpoint]:
    """Read new entries and publish a checkpoint of the database's tree (see :meth:`HostLog.publish`)."""
    with host_log.lock:
        refresh(session, host_log)
        return host_log.publish()


def open_log(db: Database, host_log: HostLog, first_entry: bytes) -> Checkpoint:
    """At start: append entry 0 to an empty log, then refuse a database tree shorter than, or inconsistent with, the published checkpoint."""
    with db.session() as session:
        lock_head(session)  # two servers starting at once on an empty database write one entry 0
        refresh(session, host_log)
        published = host_log.published()
        host_log.check_tree(None if published is None else published[1])  # before anything is written
        if host_log.tree.size == 0:
            append_entry(session, host_log, first_entry)
        else:
            _log_file_change(session, host_log, entries.decode_entry(first_entry))
    with db.session() as session:
        return publish_from(session, host_log)[1]


def _log_file_change(session: Session, host_log: HostLog, now: Mapping[str, Any]) -> None:
    """A start with another competition file than the log last named (entry 0, or the latest repin): a ``repin`` entry."""
    lock_head(session)
    last = session.scalar(select(LogEntry.entry).where(LogEntry.kind.in_(("competition", "repin"))).order_by(LogEntry.index.desc()).limit(1))
    if last is None or entries.decode_entry(bytes(last))["competition_sha256"] == now["competition_sha256"]:
        return
    entry = entries.repin_entry(
        time=utcnow(), data_digests=now["data_digests"], grader_version=__version__, competition_sha256=now["competition_sha256"]
    )
    append_entry(session, host_log, entry)


def entry_zero_keys(host_log: HostLog, *, partition_commitment: str, blinding_secret: bytes | None, host_public_key: bytes) -> dict[str, Any]:
    """Entry 0's commitments and key ids, in entry 0's own digest forms (docs/transparency.md, "What each commitment
    commits"): ``/api/v1/competition`` publishes these same values, so the two compare before the reveal."""
    return {
        "origin": host_log.origin,
        "partition_commitment": partition_commitment,
        "identifier_commitment": key_commitment(host_log.identifier_key),
        "blinding_commitment": None if blinding_secret is None else hashlib.sha256(blinding_secret).hexdigest(),
        "host_key_id": hashlib.sha256(host_public_key).hexdigest(),
        "log_key_id": hashlib.sha256(host_log.verifier.public_key.public_bytes_raw()).hexdigest(),
    }


def competition_entry(
    host_log: HostLog,
    *,
    competition_file: Path,
    partition_commitment: str,
    blinding_secret: bytes | None,
    pin_digests: Mapping[str, Any],
    host_public_key: bytes,
) -> bytes:
    """Entry 0: what the competition commits to (see docs/transparency.md)."""
    try:
        competition_sha256 = hashlib.sha256(competition_file.read_bytes()).hexdigest()
    except OSError:
        competition_sha256 = hashlib.sha256(str(competition_file).encode()).hexdigest()
    keys = entry_zero_keys(host_log, partition_commitment=partition_commitment, blinding_secret=blinding_secret, host_public_key=host_public_key)
    return entries.competition_entry(time=utcnow(), competition_sha256=competition_sha256, data_digests=flat_digests(pin_digests), **keys)


def flat_digests(pin_digests: Mapping[str, Any]) -> dict[str, str]:
    """A pin's data digests as entries name them: ``<task>/<split>`` to hex SHA-256."""
    flat: dict[str, str] = {}
    for task, splits in sorted((pin_digests.get("tasks") or {}).items()):
        for split, digest in sorted(splits.items()):
            flat[f"{task}/{split}"] = str(digest)
    return flat


def rewind(db: Database, host_log: HostLog, note: bytes, *, admin: str, reason: str) -> tuple[int, bytes]:
    """A deliberate rewind after a disaster: ``note`` is the newest checkpoint the log published (from any mirror).

    Refused when the database already extends it (nothing to rewind). Otherwise a ``rewind`` entry naming it is
    appended to the database's log, a statement signed by the log key (both trees' sizes and roots, the admin, the
    reason) is kept in ``log/rewinds/`` with the replaced checkpoint, and the new tree is published. Clients that
    saw the old checkpoint see the fork, and the statement that explains it. Returns the entry's index and the statement.
    """
    published = open_checkpoint(note, [host_log.verifier], origin=host_log.origin)
    now = utcnow()
    with db.session() as session:
        refresh(session, host_log)
        tree = host_log.tree
        if tree.size >= published.size and tree.root(published.size) == published.root_hash:
            raise HostingError(f"the database's log ({tree.size} entries) extends that checkpoint ({published.size} entries): nothing to rewind")
        before = (tree.size, tree.root())
        session.info[_HOOKED] = True  # no publishing after this commit: the rewind below publishes, deliberately
        entry = entries.rewind_entry(time=now, published_size=published.size, published_root=published.root_hash, admin=admin, reason=reason)
        index = append_entry(session, host_log, entry)
    with db.session() as session:
        refresh(session, host_log)
    text = (
        f"grader-log rewind v1\n{host_log.origin}\npublished {published.size} {base64.b64encode(published.root_hash).decode()}\n"
        f"database {before[0]} {base64.b64encode(before[1]).decode()}\nentry {index}\nadmin {admin}\nreason {reason}\n"
        f"time {entries.format_time(now)}\n"
    )
    statement = sign_note(text, [host_log.signer])
    host_log.rewind(published, statement, now.strftime("%Y%m%dT%H%M%SZ"))
    return index, statement
