"""The competition's transparency log in the database: entries appended in their events' transactions, and what is served of them.

Every event the issue lists appends its entry (:mod:`grader.translog.entries`) through
:func:`append_entry`, inside the transaction of the event, so the entry and the event commit or
roll back together. Appends are serialised across processes by an UPDATE of the ``log_head``
settings row (SQLite's write lock, PostgreSQL's row lock) before the next index is read. After
a commit that appended, the session's ``after_commit`` hook reads the new entries and publishes a
signed checkpoint (:meth:`grader.hosting.transparency.HostLog.publish`, compare-and-swap on the
checkpoint file). Everything served (checkpoint, tiles, proofs) stops at the published
checkpoint's size: nothing is served before its entry commits.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, func, select, update
from sqlalchemy.orm import Session

from grader import __version__, jsonio
from grader.hosting.clock import utcnow
from grader.hosting.config import Competition
from grader.hosting.db.models import FinalChoice, LogEntry, Participant, Setting, Submission
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.leaderboard.secret import load_partition_secret
from grader.hosting.log_key import LOG_VKEY_NAME, ensure_log_key
from grader.hosting.transparency import LOG_DIR, HostLog, LogStateError, identifier_key
from grader.hosting.visibility import ends_at
from grader.translog import entries
from grader.translog.checkpoint import Checkpoint, open_checkpoint
from grader.translog.commitments import EntryCommitter, key_commitment
from grader.translog.errors import LogVerificationError
from grader.translog.merkle import inclusion_proof, leaf_hash
from grader.translog.note import NoteVerifier, sign_note
from grader.translog.proof import TlogProof
from grader.translog.tiles import ENTRIES, TILE_HEIGHT, TILE_WIDTH, Tile, entry_bundle, parse_tile_path, tile_bytes

log = logging.getLogger("grader.hosting.translog")

#: The settings row every append locks first (its value is unused).
HEAD_SETTING = "log_head"
_HOOKED = "grader_log_publish"


def open_host_log(root: Path) -> HostLog | None:
    """The log of the state folder ``root`` for a command outside the server (``grader admin``): its origin is the name
    in ``keys/log.vkey``; None when no server has started there yet (no log key)."""
    keys = root / "keys"
    try:
        vkey = (keys / LOG_VKEY_NAME).read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise HostingError(f"{keys / LOG_VKEY_NAME}: cannot read the log's verifier key: {error}") from None
    try:
        origin = NoteVerifier.from_vkey(vkey).name
    except LogVerificationError as error:
        raise HostingError(f"{keys / LOG_VKEY_NAME}: not a verifier key: {error}") from None
    return HostLog(ensure_log_key(keys, origin), identifier_key(load_partition_secret(keys)), root / LOG_DIR)


def _lock_head(session: Session) -> None:
    """Serialise appends (and checks before them) across processes until ``session`` ends."""
    locked = session.execute(update(Setting).where(Setting.key == HEAD_SETTING).values(value=Setting.value))
    if not getattr(locked, "rowcount", 1):
        session.add(Setting(key=HEAD_SETTING, value=""))
        session.flush()


def append_entry(session: Session, host_log: HostLog, entry: bytes, *, submission_id: str | None = None, envelope_sha256: str | None = None) -> int:
    """Append ``entry`` (canonical bytes) in ``session``'s transaction; return its index. Publishes after the commit."""
    _lock_head(session)
    last = session.scalar(select(func.max(LogEntry.index)))
    index = 0 if last is None else last + 1
    kind = str(jsonio.loads(entry)["kind"])
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


def _refresh(session: Session, host_log: HostLog) -> None:
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
        _refresh(session, host_log)
        return host_log.publish()


def open_log(db: Database, host_log: HostLog, first_entry: bytes) -> Checkpoint:
    """At start: append entry 0 to an empty log, then refuse a database tree shorter than, or inconsistent with, the published checkpoint."""
    with db.session() as session:
        _lock_head(session)  # two servers starting at once on an empty database write one entry 0
        _refresh(session, host_log)
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
    _lock_head(session)
    last = session.scalar(select(LogEntry.entry).where(LogEntry.kind.in_(("competition", "repin"))).order_by(LogEntry.index.desc()).limit(1))
    if last is None or entries.decode_entry(bytes(last))["competition_sha256"] == now["competition_sha256"]:
        return
    entry = entries.repin_entry(
        time=utcnow(), data_digests=now["data_digests"], grader_version=__version__, competition_sha256=now["competition_sha256"]
    )
    append_entry(session, host_log, entry)


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
    return entries.competition_entry(
        time=utcnow(),
        origin=host_log.origin,
        competition_sha256=competition_sha256,
        partition_commitment=partition_commitment,
        identifier_commitment=key_commitment(host_log.identifier_key),
        blinding_commitment=None if blinding_secret is None else hashlib.sha256(blinding_secret).hexdigest(),
        data_digests=flat_digests(pin_digests),
        host_key_id=hashlib.sha256(host_public_key).hexdigest(),
        log_key_id=hashlib.sha256(host_log.verifier.public_key.public_bytes_raw()).hexdigest(),
    )


def flat_digests(pin_digests: Mapping[str, Any]) -> dict[str, str]:
    """A pin's data digests as entries name them: ``<task>/<split>`` to hex SHA-256."""
    flat: dict[str, str] = {}
    for task, splits in sorted((pin_digests.get("tasks") or {}).items()):
        for split, digest in sorted(splits.items()):
            flat[f"{task}/{split}"] = str(digest)
    return flat


def _participant_name(session: Session, submission: Submission) -> str:
    participant = session.get(Participant, submission.participant_id)
    return participant.name if participant is not None else str(submission.participant_id)


def log_receipt(session: Session, host_log: HostLog, submission: Submission) -> int:
    """An accepted upload's receipt, in the transaction that stores the submission."""
    entry = entries.receipt_entry(
        EntryCommitter.fresh(host_log.identifier_key),
        time=submission.uploaded_at,
        participant=_participant_name(session, submission),
        submission=submission.id,
        upload_sha256=submission.upload_sha256,
    )
    return append_entry(session, host_log, entry, submission_id=submission.id)


def _payload_sha256(envelope: bytes) -> str:
    payload = jsonio.loads(envelope)["payload"]
    return hashlib.sha256(base64.b64decode(str(payload))).hexdigest()


def log_report(session: Session, host_log: HostLog, submission: Submission, *, attempt: int, status: str, envelopes: list[Path]) -> list[int]:
    """Each report the host signed for ``attempt`` (the full one, and the public part's when there is one), in the
    transaction that records the result. A failed grade with no signed report has no envelope to log."""
    indexes = []
    name = _participant_name(session, submission)
    for path in envelopes:
        envelope = path.read_bytes()
        envelope_sha256 = hashlib.sha256(envelope).hexdigest()
        entry = entries.report_entry(
            EntryCommitter.fresh(host_log.identifier_key),
            time=utcnow(),
            participant=name,
            submission=submission.id,
            attempt=attempt,
            status=status,
            payload_sha256=_payload_sha256(envelope),
            envelope_sha256=envelope_sha256,
        )
        indexes.append(append_entry(session, host_log, entry, submission_id=submission.id, envelope_sha256=envelope_sha256))
    return indexes


def log_finals(session: Session, host_log: HostLog, time: datetime) -> list[int]:
    """At the end: each participant's final choices (committed, in a fixed order), in the ending transaction."""
    chosen: dict[int, list[str]] = {}
    for participant_id, submission_id in session.execute(select(FinalChoice.participant_id, FinalChoice.submission_id)).all():
        chosen.setdefault(participant_id, []).append(submission_id)
    indexes = []
    for participant_id, submissions in sorted(chosen.items()):
        participant = session.get(Participant, participant_id)
        name = participant.name if participant is not None else str(participant_id)
        entry = entries.finals_entry(EntryCommitter.fresh(host_log.identifier_key), time=time, participant=name, submissions=sorted(submissions)[:16])
        indexes.append(append_entry(session, host_log, entry))
    return indexes


def log_end(session: Session, host_log: HostLog, time: datetime) -> bool:
    """The finals and the ``end`` entry, once: False (nothing appended) when the log already holds its end."""
    _lock_head(session)
    if session.scalar(select(func.count()).select_from(LogEntry).where(LogEntry.kind == "end")):
        return False
    log_finals(session, host_log, time)
    append_entry(session, host_log, entries.end_entry(time=time))
    return True


def log_end_if_due(db: Database, host_log: HostLog, competition: Competition) -> bool:
    """The end reached by the competition file's ``end`` time (no admin command wrote it): logged by the first
    server process whose reaper sees it. True when this call appended it."""
    end = ends_at(db, competition)
    if utcnow() < end:
        return False
    with db.session() as session:
        if session.scalar(select(func.count()).select_from(LogEntry).where(LogEntry.kind == "end")):
            return False  # read first: no lock taken on every pass of every reaper after the end
    with db.session() as session:
        return log_end(session, host_log, end)


def log_cancellation(session: Session, host_log: HostLog, submission: Submission, *, by: str) -> int:
    """A submission cancelled by its participant or an admin, in the cancelling transaction."""
    entry = entries.cancellation_entry(
        EntryCommitter.fresh(host_log.identifier_key),
        time=utcnow(),
        participant=_participant_name(session, submission),
        submission=submission.id,
        by=by,
    )
    return append_entry(session, host_log, entry, submission_id=submission.id)


def log_rejudge(session: Session, host_log: HostLog, submission: Submission, *, attempt: int, reason: str) -> int:
    """A submission queued again by an admin, in the rejudging transaction."""
    entry = entries.rejudge_entry(
        EntryCommitter.fresh(host_log.identifier_key),
        time=utcnow(),
        participant=_participant_name(session, submission),
        submission=submission.id,
        attempt=attempt,
        reason=(reason or "rejudged")[:200],
    )
    return append_entry(session, host_log, entry, submission_id=submission.id)


def log_retraction(db: Database, host_log: HostLog, *, index: int, admin: str, reason: str) -> int:
    """An admin's retraction of entry ``index`` (never a deletion): its own transaction."""
    with db.session() as session:
        size = session.scalar(select(func.count()).select_from(LogEntry)) or 0
        if not 0 < index < size:
            raise LogVerificationError(f"entry {index} is not an entry of this log that can be retracted (entries 1..{size - 1})")
        return append_entry(session, host_log, entries.retraction_entry(time=utcnow(), index=index, admin=admin, reason=reason))


def log_reveal(db: Database, host_log: HostLog, entry: bytes) -> int:
    """Append the reveal entry (once, after the end entry) in its own transaction."""
    with db.session() as session:
        kinds = set(session.scalars(select(LogEntry.kind).where(LogEntry.kind.in_(("end", "reveal")))).all())
        if "reveal" in kinds:
            raise HostingError("the log already holds the reveal")
        if "end" not in kinds:
            raise HostingError("the reveal comes after the end entry (`grader admin end`)")
        return append_entry(session, host_log, entry)


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
        _refresh(session, host_log)
        tree = host_log.tree
        if tree.size >= published.size and tree.root(published.size) == published.root_hash:
            raise HostingError(f"the database's log ({tree.size} entries) extends that checkpoint ({published.size} entries): nothing to rewind")
        before = (tree.size, tree.root())
        session.info[_HOOKED] = True  # no publishing after this commit: the rewind below publishes, deliberately
        entry = entries.rewind_entry(time=now, published_size=published.size, published_root=published.root_hash, admin=admin, reason=reason)
        index = append_entry(session, host_log, entry)
    with db.session() as session:
        _refresh(session, host_log)
    text = (
        f"grader-log rewind v1\n{host_log.origin}\npublished {published.size} {base64.b64encode(published.root_hash).decode()}\n"
        f"database {before[0]} {base64.b64encode(before[1]).decode()}\nentry {index}\nadmin {admin}\nreason {reason}\n"
        f"time {entries.format_time(now)}\n"
    )
    statement = sign_note(text, [host_log.signer])
    host_log.rewind(published, statement, now.strftime("%Y%m%dT%H%M%SZ"))
    return index, statement


# --- what is served -----------------------------------------------------------------------------------


def checkpoint_note(db: Database, host_log: HostLog) -> bytes:
    """The latest published signed checkpoint."""
    with db.session() as session:
        published = host_log.published()
        return published[0] if published is not None else publish_from(session, host_log)[0]


def log_head(db: Database, host_log: HostLog | None) -> dict[str, Any] | None:
    """What the leaderboard page shows of the log: its origin, size and root (base64) as published; None without a log."""
    if host_log is None:
        return None
    checkpoint = open_checkpoint(checkpoint_note(db, host_log), [host_log.verifier])
    return {"origin": checkpoint.origin, "size": checkpoint.size, "root": base64.b64encode(checkpoint.root_hash).decode("ascii")}


def _published_size(session: Session, host_log: HostLog) -> int:
    published = host_log.published()
    size = published[1].size if published is not None else publish_from(session, host_log)[1].size
    if host_log.tree.size < size:
        _refresh(session, host_log)
    return size


def proof_of(db: Database, host_log: HostLog, index: int) -> TlogProof | None:
    """The tlog-proof of entry ``index`` (the entry's bytes in its ``extra`` line), against the published checkpoint."""
    with db.session() as session, host_log.lock:
        published = host_log.published()
        if published is None or published[1].size <= index:
            published = publish_from(session, host_log)
        note, checkpoint = published
        if checkpoint.size <= index:
            return None
        if host_log.tree.size < checkpoint.size:
            _refresh(session, host_log)
        row = session.get(LogEntry, index)
        assert row is not None
        hashes = inclusion_proof(host_log.tree, index, checkpoint.size)
        return TlogProof(index, tuple(hashes), note, extra=bytes(row.entry))


def receipt_of(db: Database, host_log: HostLog, submission_id: str) -> dict[str, Any] | None:
    """What the upload's answer carries: the receipt entry, its entry key (opens its commitments), its index and proof."""
    with db.session() as session:
        row = session.scalar(select(LogEntry).where(LogEntry.submission_id == submission_id, LogEntry.kind == "receipt").order_by(LogEntry.index))
        if row is None:
            return None
        index, data = row.index, bytes(row.entry)
    try:
        proof = proof_of(db, host_log, index)
    except LogStateError:  # the server refuses to sign (see the log): the upload stands, its answer says there is no proof
        log.exception("transparency log: no proof for receipt entry %d", index)
        proof = None
    decoded = entries.decode_entry(data)
    return {
        "index": index,
        "entry": data.decode("utf-8"),
        "entry_key": entries.key_of_entry(host_log.identifier_key, decoded).hex(),
        "leaf_hash": leaf_hash(data).hex(),
        "proof": None if proof is None else proof.to_bytes().decode("utf-8"),
    }


def report_proof(db: Database, host_log: HostLog, submission_id: str, envelope: bytes) -> bytes | None:
    """The tlog-proof of the report entry of this exact envelope (the one a participant downloads)."""
    digest = hashlib.sha256(envelope).hexdigest()
    with db.session() as session:
        index = session.scalar(
            select(LogEntry.index).where(LogEntry.submission_id == submission_id, LogEntry.envelope_sha256 == digest).order_by(LogEntry.index)
        )
    if index is None:
        return None
    proof = proof_of(db, host_log, index)
    return None if proof is None else proof.to_bytes()


def tile(db: Database, host_log: HostLog, path: str) -> tuple[bytes, bool] | None:
    """A tile or entry bundle of the published tree (and whether it is a full, immutable one); None if the tree has no such tile."""
    try:
        wanted: Tile = parse_tile_path(path)
    except LogVerificationError:
        return None
    with db.session() as session, host_log.lock:
        size = _published_size(session, host_log)
        level = 0 if wanted.level == ENTRIES else int(wanted.level)
        available = size >> (TILE_HEIGHT * level)
        first = wanted.index * TILE_WIDTH
        if first + wanted.width > available:
            return None
        if wanted.level != ENTRIES:
            return tile_bytes(host_log.tree, wanted), not wanted.partial
        rows = session.scalars(
            select(LogEntry.entry).where(LogEntry.index >= first, LogEntry.index < first + wanted.width).order_by(LogEntry.index)
        ).all()
        return entry_bundle([bytes(row) for row in rows]), not wanted.partial
