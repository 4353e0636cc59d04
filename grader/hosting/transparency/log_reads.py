"""What is served of the transparency log: the published checkpoint, tiles, proofs, the receipt of an upload.

Everything stops at the published checkpoint's size: nothing is served before its entry commits.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.hosting.db.models import LogEntry
from grader.hosting.db.session import Database
from grader.hosting.transparency.host_log import HostLog, LogStateError
from grader.hosting.transparency.log_store import publish_from, refresh
from grader.transparency import entries
from grader.transparency.checkpoint import open_checkpoint
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import inclusion_proof, leaf_hash
from grader.transparency.proof import TlogProof
from grader.transparency.tiles import ENTRIES, TILE_HEIGHT, TILE_WIDTH, Tile, entry_bundle, parse_tile_path, tile_bytes

log = logging.getLogger("grader.hosting.transparency")


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
        refresh(session, host_log)
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
            refresh(session, host_log)
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
