"""The host's view of the leaderboard at any time, the private board before the end included: ``grader admin leaderboard``.

Read from the state folder (host key, partition secret) and the database, as
the other admin commands do; never served over HTTP, so no participant or
anonymous request can reach it (the routes answer 404 for the private board
until the end). The partition secret must match the commitment recorded at the
first start, so the host sees the partition the board publishes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import rfc8785

from grader.hosting.clock import iso, utcnow
from grader.hosting.config import Competition, Phase
from grader.hosting.db.session import Database
from grader.hosting.errors import HostingError
from grader.hosting.keyring.files import key_files
from grader.hosting.keyring.partition_secret import load_partition_secret, recorded_commitment
from grader.hosting.leaderboard.board import BoardInputs, build_boards
from grader.hosting.leaderboard.service import board_part, boards_json
from grader.hosting.schedule import ends_at, passed
from grader.hosting.visibility import Part
from grader.reports.keys import load_public_key
from grader.stats.partition import commitment
from grader.text import escape_control


def host_board(state_dir: Path, db: Database, competition: Competition, part: Part | str, *, phase: Phase | None = None) -> dict[str, Any]:
    """The boards of ``part`` (``public`` or ``private``) as the routes publish them after the end, at any time; with
    ``phase``, that closed phase's (its board is final: as ``?phase=NAME`` serves it after the competition's end)."""
    part = board_part(part)
    keys = key_files(state_dir)
    secret = load_partition_secret(keys.folder)
    with db.session() as session:
        recorded = recorded_commitment(session)
        if recorded is None or recorded != commitment(secret):
            raise HostingError(
                f"{keys.folder}: the partition secret does not match the commitment recorded in this database (another competition's state?)"
            )
        # the phase a reader gets by default (after the end: the last one), so the reveal logs the boards the routes serve
        chosen = phase or competition.board_phase(utcnow())
        found = build_boards(session, part, BoardInputs.of(competition, load_public_key(keys.host_public), secret, chosen))
    end = ends_at(db, competition)
    ended = phase is not None or passed(end, utcnow())
    data = boards_json(found, competition=competition.name, part=part, ended=ended).model_dump(mode="json")
    data["ends_at"] = iso(end)
    data["host_only"] = part == Part.PRIVATE and not passed(end, utcnow())
    return data


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _columns(rows: list[list[str]], right: set[int]) -> list[str]:
    """``rows`` (the first is the header) as lines of aligned columns; columns in ``right`` right-aligned, the last one not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def board_text(data: dict[str, Any]) -> str:
    """The boards as plain text: one aligned table per board, one line per entry (participant text escaped for the terminal)."""
    lines = [
        f"{escape_control(data['competition'])}: {data['part']} board"
        + (f" (HOST ONLY until the end at {data['ends_at'] or 'the host ends it: a standing board has no end'})" if data["host_only"] else "")
    ]
    for board in data["boards"]:
        lines.append("")
        lines.append(f"{board['title']} ({board['method'].get('measure', '')})")
        rows = [["rank", "ranks", "group", "score", "95% interval", "participant", "submission", "final", "name"]]
        for e in board["entries"]:
            low, high = e["interval"]
            rows.append(
                [
                    "base" if e["baseline"] else ("-" if e["rank"] is None else str(e["rank"])),
                    "" if e["rank_interval"] is None else f"{e['rank_interval'][0]}-{e['rank_interval'][1]}",
                    "" if e["group"] is None else str(e["group"]),
                    e.get("unavailable") or _number(e["score"]),
                    "" if low is None else f"{_number(low)}-{_number(high)}",
                    escape_control(e["participant"]),
                    e["submission"],
                    "final" if e["final"] else "",
                    escape_control(e["name"]),
                ]
            )
        lines.extend(_columns(rows, right={0}))
    if not data["boards"]:
        lines.append("no scored hidden-split submission yet")
    return "\n".join(lines)


def board_sha256(state_dir: Path, db: Database, competition: Competition, part: Part | str, *, phase: Phase | None = None) -> str:
    """SHA-256 of the RFC 8785 JSON of ``part``'s board as ``/api/v1/leaderboard?part=...`` serves it after the end
    (with ``phase``: that phase's board, as ``...&phase=NAME`` serves it after the end): what the log's reveal and
    ``phase_board`` entries commit to."""
    data = host_board(state_dir, db, competition, part, phase=phase)
    published = {key: value for key, value in data.items() if key not in ("ends_at", "host_only")}
    return hashlib.sha256(rfc8785.dumps(published)).hexdigest()
