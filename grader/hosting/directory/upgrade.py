"""Upgrade in place: a one-competition state folder (layout 1, made by grader 0.3) becomes a server holding that one
competition (layout 2, :mod:`grader.hosting.directory.layout`).

The steps, each safe to repeat after a crash:

1. every entry of the old folder moves (``rename``: same file system, nothing copied) into
   ``competitions/<name>.upgrading/``;
2. the database's absolute paths (uploads, reports, logs) are rewritten from the old folder to the new one, in one
   transaction (on PostgreSQL the tables stay where they are: the competition's schema is ``public``);
3. ``competitions/<name>.upgrading`` is renamed ``competitions/<name>``;
4. ``server.json`` is written: only now is the folder a layout-2 server.

A start that finds step 1, 2 or 3 done and ``server.json`` missing goes on from there.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from sqlalchemy import select, text

from grader.hosting.config import load_competition
from grader.hosting.db.models import Participant
from grader.hosting.db.session import DB_FILE, Database, database_url
from grader.hosting.directory.layout import COMPETITIONS_DIR, LEGACY_SCHEMA, SERVER_FILE, ServerLayout, is_server_layout
from grader.hosting.directory.models import Person
from grader.hosting.directory.people import free_forms, open_people
from grader.hosting.errors import HostingError
from grader.hosting.keyring.files import KEYS_FOLDER
from grader.hosting.storage import recorded_competition_file

log = logging.getLogger("grader.hosting")

#: The columns that hold absolute paths into the state folder.
PATH_COLUMNS = (("submissions", "upload_path"), ("results", "envelope_path"), ("results", "report_path"), ("results", "logs_path"))
UPGRADING = ".upgrading"


def is_legacy(root: Path) -> bool:
    """Whether ``root`` is a one-competition state folder (it has keys but no server directory), or one whose upgrade
    stopped half-way."""
    if is_server_layout(root):
        return False
    # A server's directory is written before its first competition's folder: a competitions/ folder without one is
    # an upgrade that stopped before its last step.
    return (root / KEYS_FOLDER).is_dir() or (root / COMPETITIONS_DIR).is_dir()


def legacy_name(root: Path, competition_file: Path | None = None) -> tuple[str, Path]:
    """The name and file of the competition a one-competition state folder holds: ``competition_file`` when given,
    else the file its last ``grader serve`` noted there."""
    started = sorted(p for p in (root / COMPETITIONS_DIR).glob("*") if p.is_dir()) if (root / COMPETITIONS_DIR).is_dir() else []
    if len(started) > 1:
        raise HostingError(f"{root / COMPETITIONS_DIR}: {len(started)} folders but no server.json; not an upgrade this grader started")
    note_dir = started[0] if started else root
    competition_file = competition_file or recorded_competition_file(note_dir)
    if competition_file is None:
        raise HostingError(
            f"{root}: a one-competition state folder without a note of its competition file", hint="name it: upgrade-state --competition FILE"
        )
    if not competition_file.is_file():
        raise HostingError(f"{root}: its competition file {competition_file} is gone", hint="name it: upgrade-state --competition FILE")
    return load_competition(competition_file).name, competition_file


def upgrade(root: Path, database: str | None, competition_file: Path | None = None) -> ServerLayout:
    """Upgrade the one-competition state folder ``root`` into a server holding its competition; return the layout."""
    root = root.resolve()
    name, competition_file = legacy_name(root, competition_file)
    competitions = root / COMPETITIONS_DIR
    staging = competitions / f"{name}{UPGRADING}"
    final = competitions / name
    if not final.exists():
        staging.mkdir(parents=True, exist_ok=True)
        moved = 0
        for entry in sorted(root.iterdir()):
            if entry.name in (COMPETITIONS_DIR, SERVER_FILE):
                continue
            entry.rename(staging / entry.name)
            moved += 1
        _rewrite_paths(staging, database, new=final)
        staging.rename(final)
        log.info("upgrade: the state folder's %d entries moved into %s", moved, final)
    else:  # a crash after step 3: the paths were rewritten before the rename
        _rewrite_paths(final, database, new=final)
    _people_of(final, database, root)
    layout = ServerLayout(root)
    layout.add(name, competition_file, postgres=database is not None, folder=f"{COMPETITIONS_DIR}/{name}", schema=LEGACY_SCHEMA)
    layout.save()
    log.info("upgrade: %s is now a server holding competition %r (its pages under /c/%s/)", root, name, name)
    return layout


def _people_of(folder: Path, database: str | None, root: Path) -> None:
    """The competition's participants become the server's people with the same names and tokens (idempotent): the
    tokens they hold keep working, and now name them server-wide."""
    if database is None and not (folder / DB_FILE).is_file():
        return
    competition = Database(database_url(folder, database))
    people = open_people(root, database)
    try:
        with competition.session() as session:
            found = [(p.name, p.token_sha256, p.created_at, p.revoked_at) for p in session.scalars(select(Participant)).all()]
        with people.session() as session:
            known = set(session.scalars(select(Person.name)).all())
            for name, digest, created_at, revoked_at in found:
                if name not in known:
                    session.add(Person(name=name, token_sha256=digest, created_at=created_at, revoked_at=revoked_at, **free_forms(session, name)))
    finally:
        competition.dispose()
        people.dispose()


#: The folders of a state folder that stored paths point into: what precedes one of them is the old folder.
_STORED_UNDER = re.compile(r"^(.*?)/(uploads|results|runs|shards)/")


def _rewrite_paths(folder: Path, database: str | None, *, new: Path) -> None:
    """Point the database's stored paths into ``new`` (idempotent).

    A stored path is ``<old folder>/uploads/…`` or ``<old folder>/results/…``; the old folder is read from each path
    (not assumed to be where the folder is now): a state folder restored or copied from another machine upgrades too.
    """
    if database is None and not (folder / DB_FILE).is_file():
        return  # never started: nothing stored
    db = Database(database_url(folder, database))
    prefix = str(new)
    try:
        with db.session() as session:
            for table, column in PATH_COLUMNS:
                rows = session.execute(text(f"SELECT id, {column} FROM {table} WHERE {column} IS NOT NULL")).all()
                for row_id, stored in rows:
                    found = _STORED_UNDER.match(stored)
                    if found is None or found.group(1) == prefix:
                        continue
                    moved = prefix + stored[len(found.group(1)) :]
                    session.execute(text(f"UPDATE {table} SET {column} = :moved WHERE id = :id"), {"moved": moved, "id": row_id})
    finally:
        db.dispose()
