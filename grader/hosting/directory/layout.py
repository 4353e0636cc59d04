"""A server's state folder: ``server.json`` (the directory of competitions), and one folder per competition.

::

    STATE/
      server.json                 the directory: each competition's name, folder, schema, file, when added/retired
      competitions/<name>/        a competition's own state: keys, log, database (SQLite), uploads, reports

Each competition's folder is exactly what a one-competition server's state folder was: its host key, partition
secret, blinding key, log key and log, its database. Nothing of one competition lives in another's folder, and on
PostgreSQL each competition has its own schema (:func:`competition_schema`), so a query of one competition's code
cannot reach another's rows: isolation by construction, not by a ``WHERE`` clause each query must remember.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grader.files import atomic_write_text
from grader.hosting.clock import iso, utcnow
from grader.hosting.errors import HostingError

SERVER_FILE = "server.json"
COMPETITIONS_DIR = "competitions"
#: The layout's version in server.json: 2 (a folder per competition); a state folder without server.json is layout 1.
LAYOUT = 2
#: server.json is ours, but it is read before anything else: bounded all the same.
MAX_SERVER_FILE = 1 << 20
#: The schema a one-competition PostgreSQL database kept its tables in (an upgraded competition keeps them there).
LEGACY_SCHEMA = "public"
#: A competition's address in URLs (/c/<name>/) and its folder's name: the competition schema's pattern for names.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Entry:
    """One competition of the server, as server.json records it."""

    name: str
    #: Its state folder, relative to the server's.
    folder: str
    #: Its PostgreSQL schema (None on SQLite: the database is a file in its folder).
    schema: str | None
    #: The competition file it was added from (absolute), for the admin commands and restarts.
    file: str
    added_at: str
    retired_at: str | None = None

    @property
    def retired(self) -> bool:
        return self.retired_at is not None


def competition_schema(name: str) -> str:
    """The PostgreSQL schema of competition ``name``: readable, lower case, and distinct for names that differ only in
    case or punctuation (a digest of the exact name ends it)."""
    readable = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40]
    return f"c_{readable}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


class ServerLayout:
    """The directory of a server's state folder (layout 2)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.entries: dict[str, Entry] = {}

    @property
    def file(self) -> Path:
        return self.root / SERVER_FILE

    def folder(self, name: str) -> Path:
        """Competition ``name``'s state folder."""
        return self.root / self.entries[name].folder

    def active(self) -> list[Entry]:
        """The competitions served now (not retired), by name."""
        return sorted((e for e in self.entries.values() if not e.retired), key=lambda e: e.name)

    def load(self) -> ServerLayout:
        """Read server.json (refused in one line when it is not a layout-2 directory this grader wrote)."""
        try:
            with self.file.open("rb") as handle:
                raw = handle.read(MAX_SERVER_FILE + 1)
        except OSError as error:
            raise HostingError(f"{self.file}: cannot read the server's directory: {error.strerror}") from None
        if len(raw) > MAX_SERVER_FILE:
            raise HostingError(f"{self.file}: larger than {MAX_SERVER_FILE} bytes; not a directory this grader wrote")
        try:
            document = json.loads(raw)
            if document.get("layout") != LAYOUT:
                raise ValueError(f"layout {document.get('layout')!r}, expected {LAYOUT}")
            self.entries = {e["name"]: Entry(**e) for e in document["competitions"]}
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise HostingError(f"{self.file}: not a server directory this grader can read: {error}") from None
        return self

    def save(self) -> None:
        """Write server.json atomically (0600: it names files and schemas of the host's)."""
        document: dict[str, Any] = {"layout": LAYOUT, "competitions": [asdict(e) for e in sorted(self.entries.values(), key=lambda e: e.name)]}
        atomic_write_text(self.file, json.dumps(document, indent=2, sort_keys=True) + "\n", mode=0o600)

    def add(self, name: str, competition_file: Path, *, postgres: bool, folder: str | None = None, schema: str | None = None) -> Entry:
        """Record competition ``name`` (refused when the name is taken, by another case too, or not an address)."""
        if not NAME.match(name):
            raise HostingError(f"competition name {name!r}: not an address (letters, digits, '.', '_', '-'; at most 64)")
        taken = {n.lower(): n for n in self.entries}
        if name.lower() in taken:
            raise HostingError(f"competition {name!r}: this server already has {taken[name.lower()]!r}")
        entry = Entry(
            name=name,
            folder=folder or f"{COMPETITIONS_DIR}/{name}",
            schema=(schema or competition_schema(name)) if postgres else None,
            file=str(competition_file.resolve()),
            added_at=iso(utcnow()) or "",
        )
        self.entries[name] = entry
        return entry

    def retire(self, name: str) -> Entry:
        """Mark ``name`` retired: no longer served; its folder and rows stay (for export, or a later return)."""
        entry = self.entries.get(name)
        if entry is None:
            raise HostingError(f"no competition {name!r} on this server (it has: {', '.join(sorted(self.entries)) or 'none'})")
        retired = Entry(**{**asdict(entry), "retired_at": iso(utcnow())})
        self.entries[name] = retired
        return retired

    def pick(self, name: str | None) -> Entry:
        """Competition ``name``, or the only active one when ``name`` is None; else one line naming the choices."""
        if name is not None:
            entry = self.entries.get(name)
            if entry is None:
                raise HostingError(f"no competition {name!r} on this server (it has: {', '.join(sorted(self.entries)) or 'none'})")
            return entry
        active = self.active()
        if len(active) == 1:
            return active[0]
        names = ", ".join(e.name for e in active) or "none"
        raise HostingError(f"this server holds {len(active)} competitions ({names}): name one with --in NAME")


def is_server_layout(root: Path) -> bool:
    """Whether ``root`` is a layout-2 server state folder."""
    return (root / SERVER_FILE).is_file()
