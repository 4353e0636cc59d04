"""A client of a served transparency log: fetch its checkpoint and tiles over HTTP, check consistency, keep what was seen.

Used by ``grader verify --log URL`` and ``grader log audit URL``. ``URL`` is the log's prefix (a
server's ``http://HOST/log``): ``URL/checkpoint`` and ``URL/tile/...`` are fetched under the bounds of
:mod:`grader.hosting.participant.fetch` (size, deadlines, minimum rate), and trusted no further than
the checks of :mod:`grader.transparency` allow.
The checkpoints a user has seen are kept per log key (:mod:`grader.cli.log_seen`), so that every later one is
checked against all of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import click
import httpx

from grader import files
from grader.cli.log_final import check_final_scores
from grader.cli.log_seen import MAX_KEPT_LEAVES, SeenLog
from grader.errors import KeyFileError
from grader.files import atomic_write_bytes
from grader.hosting.participant.fetch import Fetcher
from grader.text import escape_lines
from grader.transparency.boards import check_boards_against_log
from grader.transparency.checkpoint import Checkpoint, check_extends, open_checkpoint
from grader.transparency.errors import InconsistentCheckpoints, LogTooLarge, LogVerificationError
from grader.transparency.merkle import consistency_proof
from grader.transparency.mirror import CHECKPOINT_NAME, MAX_AUDIT_ENTRIES, LogReader
from grader.transparency.note import MAX_NOTE_BYTES, NoteVerifier
from grader.transparency.published import check_published
from grader.transparency.tiles import MAX_ENTRY_BYTES, TILE_WIDTH, TileNodes, iter_bundles, iter_tiles

_TILE_BYTES = TILE_WIDTH * 32
_BUNDLE_BYTES = TILE_WIDTH * (2 + MAX_ENTRY_BYTES)
_BOARD_BYTES = 16 << 20
_REPORT_BYTES = 64 << 20

_MAX_VKEY_FILE = 4096


def read_bounded(path: str, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of ``path``; an unreadable or larger file fails verification (exit 1, one line)."""
    return files.read_bounded(path, limit, lambda reason: LogVerificationError(f"{path}: {reason}"), what=what)


def log_verifier(value: str) -> NoteVerifier:
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


def log_fetcher() -> Fetcher:
    """The fetches of one log command: each under the bounds of :mod:`grader.hosting.participant.fetch` (deadline per
    fetch and per command, minimum rate), a bound hit being a :class:`LogVerificationError` (exit 1)."""
    return Fetcher(LogVerificationError)


def fetch(fetcher: Fetcher, base: str, path: str, limit: int) -> bytes:
    """``base/path``, at most ``limit`` bytes; any other answer than 200 is a :class:`LogVerificationError`."""
    url = f"{base.rstrip('/')}/{path}"
    try:
        answer = fetcher.fetch("GET", url, max_bytes=limit)
    except httpx.HTTPError as error:
        raise LogVerificationError(f"{url}: cannot fetch: {error.__class__.__name__}") from None
    if answer.status_code != 200:
        raise LogVerificationError(f"{url}: HTTP {answer.status_code}")
    return answer.content


def remote_reader(fetcher: Fetcher, base: str) -> LogReader:
    """The served log at ``base`` as a :data:`~grader.transparency.mirror.LogReader`: :func:`read_log` checks each file as it arrives."""
    return lambda path, limit: fetch(fetcher, base, path, limit)


def fetch_checkpoint(fetcher: Fetcher, base: str, verifier: NoteVerifier) -> tuple[bytes, Checkpoint]:
    """The log's newest checkpoint, signed by ``verifier``'s key and naming its origin."""
    note = fetch(fetcher, base, CHECKPOINT_NAME, MAX_NOTE_BYTES)
    return note, open_checkpoint(note, [verifier], origin=verifier.name)


def remote_nodes(fetcher: Fetcher, base: str, size: int) -> TileNodes:
    """The nodes of the served tree of ``size`` leaves, read from its tiles."""
    return TileNodes(size, lambda tile: fetch(fetcher, base, tile.path, _TILE_BYTES))


def check_consistent(fetcher: Fetcher, base: str, seen_notes: Iterable[bytes], note: bytes, checkpoint: Checkpoint, verifier: NoteVerifier) -> None:
    """Check that the served ``checkpoint`` extends every checkpoint in ``seen_notes`` (consistency proofs from the tiles);
    :class:`InconsistentCheckpoints` with both notes otherwise."""
    nodes = remote_nodes(fetcher, base, checkpoint.size)
    for seen_note in seen_notes:
        seen = open_checkpoint(seen_note, [verifier], origin=checkpoint.origin)
        try:
            proof = consistency_proof(nodes, seen.size, checkpoint.size) if 0 < seen.size < checkpoint.size else []
            check_extends(seen, checkpoint, proof)
        except LogVerificationError as error:
            raise InconsistentCheckpoints(f"the log contradicts a checkpoint seen before: {error}", seen=seen_note, new=note) from None


def mirror(base: str, folder: Path, verifier: NoteVerifier) -> None:
    """Download the log into ``folder`` as the server serves it (checkpoint last); checks are :func:`read_log_folder`'s.

    ``grader log audit URL`` reads the served log directly (:func:`remote_reader`), checking each file as it arrives;
    this keeps a copy on disk for the tools that want one, bounded as the audit is (a checkpoint claiming more than
    :data:`MAX_AUDIT_ENTRIES` entries is refused before any tile is fetched).
    """
    fetcher = log_fetcher()
    note, checkpoint = fetch_checkpoint(fetcher, base, verifier)
    if checkpoint.size > MAX_AUDIT_ENTRIES:
        raise LogTooLarge(f"{base}: its checkpoint claims {checkpoint.size} entries, more than the {MAX_AUDIT_ENTRIES} a mirror copies")
    for tile in iter_tiles(checkpoint.size):
        atomic_write_bytes(folder / tile.path, fetch(fetcher, base, tile.path, _TILE_BYTES))
    for bundle in iter_bundles(checkpoint.size):
        atomic_write_bytes(folder / bundle.path, fetch(fetcher, base, bundle.path, _BUNDLE_BYTES))
    atomic_write_bytes(folder / CHECKPOINT_NAME, note)


def keep_served_leaves(fetcher: Fetcher, base: str, store: SeenLog, checkpoint: Checkpoint) -> None:
    """Keep the leaf hashes of the served tree of ``checkpoint`` (already checked against everything seen): the kept
    ones, and the level-0 tiles of the rest. What tells a stale copy of the log from a fork later (:mod:`log_seen`)."""
    kept = store.leaves()
    if checkpoint.size > MAX_KEPT_LEAVES or checkpoint.size <= len(kept):
        return
    nodes = remote_nodes(fetcher, base, checkpoint.size)
    store.keep_leaves(kept + [nodes.node(0, index) for index in range(len(kept), checkpoint.size)], checkpoint)


def shown(note: bytes) -> str:
    """A signed note for a terminal: each line escaped (no control or bidi character reaches it), newlines kept."""
    return escape_lines(note.decode("utf-8", "replace"))


def print_evidence(error: InconsistentCheckpoints, seen_label: str, new_label: str) -> None:
    """Both signed checkpoints, verbatim (escaped), on stderr: portable evidence of an inconsistent log."""
    click.echo(f"checkpoint seen before ({seen_label}):", err=True)
    click.echo(shown(error.seen), err=True, nl=False)
    click.echo(f"checkpoint now ({new_label}):", err=True)
    click.echo(shown(error.new), err=True, nl=False)


def check_served_board(fetcher: Fetcher, log_url: str, entries: Sequence[bytes]) -> str:
    """Check the boards served beside the log at ``log_url`` (``http://HOST/log``) against the log
    (:func:`grader.transparency.boards.check_boards_against_log`); the line to print."""
    base = log_url.rstrip("/").removesuffix("/log")

    def read(path: str) -> bytes:
        return fetch(fetcher, base, path, _BOARD_BYTES if not path.startswith("api/v1/leaderboard/reports/") else _REPORT_BYTES)

    scores = check_final_scores(entries, read)  # after the reveal: every final row recomputed from its signed report, first:
    line = check_boards_against_log(entries, read)  # a row changed after the reveal is then named, not only the board
    return line if scores is None else f"{line}\n{scores}"


def check_served_host(fetcher: Fetcher, log_url: str, entries: Sequence[bytes]) -> str:
    """Check what the host at ``log_url`` (``http://HOST/log``) publishes beside its log against entry 0
    (:func:`grader.transparency.published.check_published`); the line to print."""
    base = log_url.rstrip("/").removesuffix("/log")
    return check_published(entries, lambda path: fetch(fetcher, base, path, _BOARD_BYTES))
