"""``grader admin competition import BUNDLE --competition FILE``: a competition exported by another server (or this
one), added to this server with its rows, files, keys and log, checked before it is recorded.

The order, so that a refusal leaves nothing and a failure part-way leaves nothing served:

1. read the whole bundle, writing nothing (:func:`grader.hosting.directory.bundle_read.read_bundle`: bounds, links,
   names, digests, rows parsed);
2. refuse with one line: another grader's schema revision, a competition file naming another competition, a name
   this server has (served or retired), rows of another competition (a pin or the log naming another), a participant
   whose name belongs to another person here (receipts commit participants' names: the name cannot change), not
   enough disk;
3. copy the files into ``competitions/<name>.importing`` (new, 0700), insert the rows into a new database (SQLite
   in that folder, or a new PostgreSQL schema) in one transaction, and check the log and every report
   (:mod:`grader.hosting.directory.bundle_verify`) and the caller's ``hold`` (``grader admin competition import``:
   an ended competition whose file now moves its end later stays ended, refused as at start); on any failure the
   folder and the schema are removed;
4. rename the folder ``competitions/<name>``, add the participants the server does not know as people (their token
   digests as they were: their tokens keep working), and write ``server.json`` last: only now is it served.

Workers travel with their rows (reports name the worker that graded them). A remote worker whose name another
competition of this server registers under another token keeps its rows here, revoked: its reports still name it,
and it claims nothing until the host registers it again (``add-worker --same-token`` needs a fresh name there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select, text

from grader.hosting.clock import utcnow
from grader.hosting.config import Competition, load_competition
from grader.hosting.db.models import Worker
from grader.hosting.db.session import DB_FILE, Database, database_url, head_revision, migrate
from grader.hosting.directory.bundle_format import BundleError, bundle_tables, decode_value, encode_value
from grader.hosting.directory.bundle_read import Bundle, extract_files, read_bundle
from grader.hosting.directory.bundle_verify import Verified, verify_imported
from grader.hosting.directory.databases import competition_database, drop_schema, existing_database, schema_exists
from grader.hosting.directory.layout import Entry, ServerLayout, is_server_layout
from grader.hosting.directory.models import Person
from grader.hosting.directory.people import free_forms, open_people
from grader.hosting.directory.upgrade import is_legacy
from grader.hosting.errors import HostingError
from grader.hosting.storage import PRIVATE_UMASK

IMPORTING = ".importing"
#: Room left on the target's disk beyond the bundle's files (the database, a server's logs).
DISK_MARGIN = 256 << 20


@dataclass
class Imported:
    """What an import did: the competition, its counts and checks, the workers it revoked (name conflicts)."""

    entry: Entry
    rows: int
    files: int
    verified: Verified
    new_people: list[str] = field(default_factory=list)
    revoked_workers: list[str] = field(default_factory=list)


#: A check of the imported rows against the competition file, before anything is recorded (the caller's: the refusal to
#: reopen an ended competition lives in the services, above this layer); it raises to refuse.
Hold = Callable[[Database, Competition], None]


def import_competition(state_dir: Path, bundle_path: Path, competition_file: Path, database: str | None, *, hold: Hold | None = None) -> Imported:
    """Import the bundle at ``bundle_path`` into the server state folder ``state_dir`` (see the module's docstring);
    under the server's umask (077): the competition's keys, rows and folders are the host's alone from the start.
    ``hold`` runs on the imported rows once they check out; what it raises refuses the import, leaving nothing."""
    before = os.umask(PRIVATE_UMASK)
    try:
        return _import(state_dir, bundle_path, competition_file, database, hold)
    finally:
        os.umask(before)


def _import(state_dir: Path, bundle_path: Path, competition_file: Path, database: str | None, hold: Hold | None) -> Imported:
    if is_legacy(state_dir):
        raise HostingError(
            f"{state_dir}: the state folder of a one-competition server", hint=f"upgrade it first: grader admin --state {state_dir} upgrade-state"
        )
    bundle = read_bundle(bundle_path)
    layout = ServerLayout(state_dir).load() if is_server_layout(state_dir) else ServerLayout(state_dir)
    competition = _check(bundle, layout, competition_file)
    entry = layout.add(bundle.name, competition_file, postgres=database is not None)  # refused if the name is taken
    people = _people(layout, database)
    _check_people(bundle, people)
    final = layout.folder(bundle.name)
    staging = final.with_name(final.name + IMPORTING)
    if final.exists():
        raise HostingError(f"{final}: a folder of that name is here already (not in server.json); remove it or import elsewhere")
    revoked = _map_workers(bundle, _workers_elsewhere(layout, database, bundle.name))
    free = shutil.disk_usage(next(p for p in (layout.root, *layout.root.parents) if p.exists())).free
    if bundle.total_bytes + DISK_MARGIN > free:
        raise HostingError(f"{layout.root}: {free} bytes free, the bundle's files need {bundle.total_bytes} (and room to serve)")
    schema_made = _new_schema(entry, database)
    # the folders made here go again on a failure: an empty competitions/ without server.json reads as an upgrade stopped
    made = [folder for folder in (layout.root, staging.parent) if not folder.exists()]
    layout.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if staging.exists():
            shutil.rmtree(staging)  # an import that stopped part-way: never recorded, never served
        staging.mkdir(mode=0o700, parents=True)
        extract_files(bundle, staging)
        db = Database(database_url(staging, competition_database(entry, database)))
        try:
            migrate(db.engine, bundle.schema_revision)
            rows = _insert(db, bundle, str(final))
            verified = verify_imported(db, staging, bundle.name, str(final))
            if hold is not None:
                try:
                    hold(db, competition)
                except HostingError as error:  # its line names no file: the host's command gave two
                    raise HostingError(f"{competition_file}: competition {bundle.name!r} not imported: {error}", hint=error.hint) from None
        finally:
            db.dispose()
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):  # not empty: something not ours is there, and stays
                folder.rmdir()
        if schema_made is not None and database is not None:
            drop_schema(database, schema_made)
        raise
    new_people = _add_people(bundle, people or open_people(layout.root, database))
    layout.save()  # last: only now does the server serve it
    return Imported(layout.entries[bundle.name], rows, len(bundle.files), verified, new_people, revoked)


def _check(bundle: Bundle, layout: ServerLayout, competition_file: Path) -> Competition:
    """The refusals that need no database: the schema revision, the competition file, the name, the pins; the competition."""
    if bundle.schema_revision != head_revision():
        raise HostingError(
            f"{bundle.path}: exported at schema revision {bundle.schema_revision} (grader {bundle.grader}); this grader's is {head_revision()}",
            hint="run the same grader version on both servers (upgrade the older one, start it once, export again)",
        )
    competition = load_competition(competition_file)
    named = competition.name
    if named != bundle.name:
        raise HostingError(f"{competition_file}: names competition {named!r}; the bundle holds {bundle.name!r}")
    if bundle.name in layout.entries:
        state = "retired" if layout.entries[bundle.name].retired else "served"
        raise HostingError(f"competition {bundle.name!r} is already on this server ({state}); a name is never reused")
    others = sorted({str(pin["competition"]) for pin in bundle.rows["pins"]} - {bundle.name})
    if others:
        raise BundleError(f"{bundle.path}: it holds rows of competition {others[0]!r}, not only of {bundle.name!r}; refused")
    return competition


def _people(layout: ServerLayout, database: str | None) -> Database | None:
    """The server's people database (None on a server not made yet: it has no people, and nothing is written before
    the checks pass)."""
    return open_people(layout.root, database) if is_server_layout(layout.root) else None


def _check_people(bundle: Bundle, people: Database | None) -> None:
    """Refuse a participant whose name another person of this server holds (another token), or whose token another
    person holds under another name: receipts in the log commit participants' names, so a name cannot be changed."""
    if people is None:
        return
    with people.session() as session:
        known = {p.name: p.token_sha256 for p in session.scalars(select(Person)).all()}
    holders = {digest: name for name, digest in known.items()}
    for row in bundle.rows["participants"]:
        name, digest = str(row["name"]), str(row["token_sha256"])
        if name in known and known[name] != digest:
            raise HostingError(
                f"participant {name!r}: the name belongs to another person on this server (receipts commit participants' names); import refused"
            )
        if digest in holders and holders[digest] != name:
            raise HostingError(f"participant {name!r}: their token is held by person {holders[digest]!r} on this server; import refused")


def _workers_elsewhere(layout: ServerLayout, database: str | None, name: str) -> dict[str, str]:
    """The remote workers the server's other competitions (not ``name``) register: name -> token digest."""
    found: dict[str, str] = {}
    for entry in layout.entries.values():
        folder = layout.folder(entry.name)
        if entry.name == name or (entry.schema is None and not (folder / DB_FILE).is_file()):
            continue  # the bundle's, not made yet; one never started, which registers nobody
        db = Database(database_url(folder, existing_database(entry, folder, database)))
        try:
            with db.session() as session:
                for worker in session.scalars(select(Worker).where(Worker.local.is_(False))).all():
                    found.setdefault(worker.name, worker.token_sha256)
        finally:
            db.dispose()
    return found


def _map_workers(bundle: Bundle, elsewhere: dict[str, str]) -> list[str]:
    """Revoke (in the bundle's rows, before they are inserted) each remote worker whose name this server registers
    under another token: one name, one token on a server; its rows stay, as its reports name it."""
    revoked = []
    now = encode_value(_table("workers"), _table("workers").c.revoked_at, utcnow(), "")
    for row in bundle.rows["workers"]:
        name = str(row["name"])
        if not row["local"] and name in elsewhere and elsewhere[name] != row["token_sha256"]:
            revoked.append(name)
            row["revoked_at"] = row["revoked_at"] or now
    return revoked


def _table(name: str) -> Any:
    return next(table for table in bundle_tables() if table.name == name)


def _new_schema(entry: Entry, database: str | None) -> str | None:
    """On PostgreSQL, the competition's schema, created now; refused when it exists (it would hold another's rows)."""
    if database is None or entry.schema is None:
        return None
    if schema_exists(database, entry.schema):
        raise HostingError(f"database: schema {entry.schema} exists already; it is not this server's competition {entry.name!r}")
    competition_database(entry, database)  # creates it
    return entry.schema


def _insert(db: Database, bundle: Bundle, folder: str) -> int:
    """Every table's rows in one transaction, parents first; on PostgreSQL each id sequence set past the ids taken."""
    count = 0
    with db.session() as session:
        for table in reversed(bundle_tables()):
            session.execute(table.delete())  # what the migrations seeded (a new database holds nothing else): the bundle's rows replace it
        for table in bundle_tables():
            rows = [
                {column.name: decode_value(table, column, row[column.name], folder) for column in table.columns} for row in bundle.rows[table.name]
            ]
            if rows:
                session.execute(insert(table), rows)
                count += len(rows)
            key = list(table.primary_key.columns)
            if (
                db.engine.dialect.name == "postgresql"
                and rows
                and len(key) == 1
                and key[0].autoincrement is not False
                and key[0].type.python_type is int
            ):
                session.execute(
                    text(f"SELECT setval(pg_get_serial_sequence(:t, :c), (SELECT max({key[0].name}) FROM {table.name}))"),
                    {"t": table.name, "c": key[0].name},
                )
    return count


def _add_people(bundle: Bundle, people: Database) -> list[str]:
    """The participants this server does not know yet become its people, with the token digests they hold."""
    added = []
    try:
        with people.session() as session:
            known = set(session.scalars(select(Person.name)).all())
            for row in bundle.rows["participants"]:
                if row["name"] not in known:
                    session.add(_person(row, free_forms(session, str(row["name"]))))
                    added.append(str(row["name"]))
    finally:
        people.dispose()
    return added


def _person(row: dict[str, Any], forms: dict[str, str | None]) -> Person:
    participants = _table("participants")
    created = decode_value(participants, participants.c.created_at, row["created_at"], "")
    revoked = decode_value(participants, participants.c.revoked_at, row["revoked_at"], "")
    return Person(name=str(row["name"]), token_sha256=str(row["token_sha256"]), created_at=created, revoked_at=revoked, **forms)


__all__ = ["Imported", "import_competition"]
