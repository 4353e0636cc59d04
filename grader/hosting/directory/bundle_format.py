"""A competition bundle's format: what ``grader admin competition export`` writes and ``import`` reads.

A bundle is a gzip-compressed tar (0600: it holds the competition's keys) of exactly these members, ``manifest.json``
first::

    manifest.json            format and version, the competition's name, the grader and schema revision that wrote
                             it, each table's row count, and the name, size and sha256 of every other member
    competition.toml         the competition file as the source served it (for the record; import takes the
                             target's own copy, whose benchmark paths are the target's)
    rows/<table>.jsonl       each row of the competition's table, one JSON object a line, in a database-neutral form
                             (:func:`encode_value`): instants as ISO 8601 in UTC, bytes as base64, enums as their
                             values, paths into the state folder relative to it (``{"in_state": "results/…"}``)
    files/<path>             the competition folder's files: keys, log checkpoint, uploads, reports, runs

What a bundle never holds: the database file itself (its rows travel as rows, so SQLite and PostgreSQL trade
bundles), what a server makes again at its start (local workers' pid files and logs, their data copy), web sessions
and upload reservations (a server's, not the competition's; a cookie of the old server opens nothing on the new one),
and the server database: a person is carried by their registration, the participant row (name and token digest).

Every rule of reading is here, once (:func:`member_path`): the bundle is untrusted input.
"""

from __future__ import annotations

import base64
import enum
import re
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import JSON, Boolean, Column, Enum, LargeBinary, Table

from grader.hosting.db.models import Base, UTCDateTime
from grader.hosting.errors import HostingError

FORMAT = "grader-competition-bundle"
VERSION = 1
MANIFEST = "manifest.json"
COMPETITION_FILE = "competition.toml"
ROWS = "rows"
FILES = "files"

#: The manifest is read whole into memory before anything else: bounded.
MAX_MANIFEST_BYTES = 64 << 20
#: The competition file, read whole.
MAX_COMPETITION_FILE_BYTES = 1 << 20
#: Every table's rows are read into memory and checked before a byte is written: together at most this.
MAX_ROWS_BYTES = 1 << 30
#: One row (a log entry, a replica's detail): at most this many bytes of JSON.
MAX_ROW_BYTES = 16 << 20
#: Members of one bundle, at most (a competition's reports and runs are a few per submission).
MAX_MEMBERS = 1_000_000
#: Bytes of one bundle's members together, at most; an import also needs them free on the target's disk.
MAX_TOTAL_BYTES = 1 << 40
#: A member's name, at most this long (a tar's PAX header could carry any length).
MAX_NAME = 1024

#: The competition folder's top-level entries a bundle carries (everything else is the server's to make again:
#: ``run/``, ``worker-data/``, the database file and its ``-wal``/``-shm``, the competition-file note).
CARRIED = frozenset({"keys", "log", "uploads", "results", "runs", "parked", "shards"})
#: Inside a carried folder, what is never carried: uploads still in progress.
NOT_CARRIED = frozenset({"uploads/tmp"})
#: Tables whose rows are the server's, not the competition's (see the module's docstring).
SKIPPED_TABLES = frozenset({"web_sessions", "upload_reservations"})
#: Columns holding a path into the competition's state folder (absolute on the server that wrote them).
PATH_COLUMNS = frozenset({("submissions", "upload_path"), ("results", "envelope_path"), ("results", "report_path"), ("results", "logs_path")})
#: A stored path into a state folder: what precedes one of these folders is the folder (grader.hosting.directory.upgrade).
STORED_UNDER = re.compile(r"^(/.*?)/(uploads|results|runs|shards|parked)/")
#: A member name's parts: no hidden tricks (``..``, empty parts, control characters, backslashes).
_PART = re.compile(r"^[A-Za-z0-9_@+=,.-][A-Za-z0-9_@+=,.-]*$")


class BundleError(HostingError):
    """A bundle refused: not one this grader wrote, or not the competition it says."""


def bundle_tables() -> list[Table]:
    """The competition's tables a bundle carries, parents before children (inserted in this order)."""
    return [table for table in Base.metadata.sorted_tables if table.name not in SKIPPED_TABLES]


def member_path(name: str) -> PurePosixPath:
    """The member name ``name`` as a relative path, or :class:`BundleError`: absolute, ``..``, ``.``, empty parts,
    odd characters, too long. Applied to every member's name before its bytes are read."""
    if not name or len(name) > MAX_NAME or name.startswith("/") or "\\" in name:
        raise BundleError(f"bundle member {name[:80]!r}: not a relative path this grader writes")
    parts = name.split("/")
    if any(part in ("", ".", "..") or not _PART.match(part) for part in parts):
        raise BundleError(f"bundle member {name[:80]!r}: not a relative path this grader writes (no '..', no empty or odd parts)")
    return PurePosixPath(name)


def carried_file(relative: PurePosixPath) -> bool:
    """Whether ``relative`` (a path inside the competition folder) is one a bundle carries."""
    text = relative.as_posix()
    return relative.parts[0] in CARRIED and len(relative.parts) > 1 and not any(text == n or text.startswith(n + "/") for n in NOT_CARRIED)


def encode_value(table: Table, column: Column[Any], value: Any, folder: str) -> Any:
    """``value`` of ``column`` as the bundle holds it: JSON, the same for SQLite and PostgreSQL (``folder``: the
    competition's, which stored paths name)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, enum.Enum):
        return value.value
    if (table.name, column.name) in PATH_COLUMNS and isinstance(value, str):
        if value.startswith(folder + "/"):
            return {"in_state": value[len(folder) + 1 :]}
        # else the folder is read from the path: a state folder reached through a link, or restored elsewhere, stored
        # its paths under another spelling (grader.hosting.directory.upgrade reads them the same way)
        if found := STORED_UNDER.match(value):
            return {"in_state": value[len(found.group(1)) + 1 :]}
    return value


def decode_value(table: Table, column: Column[Any], value: Any, folder: str) -> Any:
    """The bundle's ``value`` of ``column`` as the target database takes it (``folder``: the competition's new folder).

    A value of the wrong shape raises :class:`BundleError` naming the table and column."""
    if value is None:
        return None
    kind = column.type
    try:
        if (table.name, column.name) in PATH_COLUMNS:
            if isinstance(value, dict) and set(value) == {"in_state"}:
                return f"{folder}/{member_path(str(value['in_state'])).as_posix()}"
            # otherwise a name relative to its folder (an upload's): never absolute, never '..'
            return member_path(str(value)).as_posix()
        if isinstance(kind, UTCDateTime):
            moment = datetime.fromisoformat(str(value))
            if moment.tzinfo is None:
                raise BundleError(f"bundle rows of {table.name}: column {column.name}: an instant without its zone")
            return moment
        if isinstance(kind, LargeBinary):
            return base64.b64decode(str(value), validate=True)
        if isinstance(kind, Enum) and kind.enum_class is not None:
            return kind.enum_class(value)
        if isinstance(kind, Boolean):
            if not isinstance(value, bool):
                raise BundleError(f"bundle rows of {table.name}: column {column.name}: not true or false")
            return value
        if isinstance(kind, JSON):
            return value
        if isinstance(value, (dict, list)):
            raise BundleError(f"bundle rows of {table.name}: column {column.name}: an object where a plain value belongs")
        return value
    except (ValueError, TypeError, KeyError) as error:
        raise BundleError(f"bundle rows of {table.name}: column {column.name}: {error}") from None
