"""``grader admin competition export NAME --out BUNDLE``: one competition of a server, written as a bundle
(:mod:`grader.hosting.directory.bundle_format`).

The competition must be retired first (a running server stops serving it within seconds), so that nothing writes to
its rows or files while they are read. Its rows are read in one transaction of its own database (its SQLite file, or
its PostgreSQL schema: by construction they are its rows, and no other competition's). The bundle is written to a
temporary file (0600) beside ``BUNDLE`` and renamed only once whole: a failed export leaves nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from sqlalchemy import select

from grader import __version__, jsonio
from grader.files import read_bounded
from grader.hosting.clock import iso, utcnow
from grader.hosting.db.session import Database, open_database
from grader.hosting.directory.bundle_format import (
    CARRIED,
    COMPETITION_FILE,
    FILES,
    FORMAT,
    MANIFEST,
    MAX_COMPETITION_FILE_BYTES,
    ROWS,
    VERSION,
    BundleError,
    bundle_tables,
    carried_file,
    encode_value,
    member_path,
)
from grader.hosting.directory.databases import existing_database
from grader.hosting.directory.layout import ServerLayout, is_server_layout
from grader.hosting.errors import HostingError

#: Bytes read at a time while a file is hashed and copied into the bundle.
CHUNK = 1 << 20


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the bundle, how many rows and files it holds."""

    path: Path
    rows: int
    files: int


def export_competition(state_dir: Path, name: str, out: Path, database: str | None) -> Exported:
    """Write competition ``name`` of the server state folder ``state_dir`` to the bundle ``out`` (refused while served)."""
    if not is_server_layout(state_dir):
        raise HostingError(f"{state_dir}: not the state folder of a server of many competitions")
    layout = ServerLayout(state_dir).load()
    entry = layout.pick(name)
    if not entry.retired:
        raise HostingError(
            f"competition {name!r} is served: retire it first (grader admin competition retire {name}), so that nothing changes while it is exported"
        )
    folder = layout.folder(name)
    url = existing_database(entry, folder, database)
    db = open_database(folder, url)  # migrated to this grader's schema, as every admin command's: the bundle names it
    try:
        rows, counts, revision = _rows(db, str(folder))
    finally:
        db.dispose()
    files = _files(folder)
    competition_bytes = read_bounded(
        Path(entry.file), MAX_COMPETITION_FILE_BYTES, lambda reason: HostingError(f"{entry.file}: {reason}"), what="competition file"
    )
    members: list[dict[str, Any]] = [_member(COMPETITION_FILE, competition_bytes)]
    members += [_member(f"{ROWS}/{table}.jsonl", data) for table, data in rows.items()]
    members += [{"name": f"{FILES}/{relative.as_posix()}", "bytes": size, "sha256": digest} for relative, size, digest in files]
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "competition": name,
        "grader": __version__,
        "schema_revision": revision,
        "exported_at": iso(utcnow()),
        "source_database": "sqlite" if url is None else "postgresql",
        "tables": counts,
        "members": members,
    }
    _write(out, manifest, competition_bytes, rows, folder, files)
    return Exported(out, sum(counts.values()), len(files))


def _member(name: str, data: bytes) -> dict[str, Any]:
    return {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _rows(db: Database, folder: str) -> tuple[dict[str, bytes], dict[str, int], str]:
    """Every carried table's rows as JSON lines, their counts, and the schema revision: one transaction, one snapshot."""
    rows: dict[str, bytes] = {}
    counts: dict[str, int] = {}
    with db.session() as session:
        revision = session.connection().exec_driver_sql("SELECT version_num FROM alembic_version").scalar_one()
        for table in bundle_tables():
            primary = list(table.primary_key.columns)
            lines = []
            for row in session.execute(select(table).order_by(*primary)).mappings():
                encoded = {column.name: encode_value(table, column, row[column], folder) for column in table.columns}
                lines.append(jsonio.dumps(encoded, ensure_ascii=True))
            rows[table.name] = ("\n".join(lines) + "\n").encode("ascii") if lines else b""
            counts[table.name] = len(lines)
    return rows, counts, str(revision)


def _files(folder: Path) -> list[tuple[PurePosixPath, int, str]]:
    """The competition folder's carried files: relative path, size, sha256 (a link, or anything but a plain file or
    folder, is refused: nothing a bundle carries may point elsewhere)."""
    found: list[tuple[PurePosixPath, int, str]] = []
    for top, folders, names in os.walk(folder):
        here = Path(top)
        if here == folder:  # only the carried folders are walked: the rest is the server's to make again
            folders[:] = [name for name in folders if name in CARRIED]
        for name in sorted(folders):
            if (here / name).is_symlink():
                raise BundleError(f"{here / name}: a link in the competition's folder; a bundle carries no links")
        for name in sorted(names):
            path = here / name
            relative = PurePosixPath(path.relative_to(folder).as_posix())
            if not carried_file(relative):
                continue
            if path.is_symlink() or not path.is_file():
                raise BundleError(f"{path}: not a plain file; a bundle carries no links")
            member_path(f"{FILES}/{relative.as_posix()}")
            found.append((relative, *_digest(path)))
    return sorted(found)


def _digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


class _Checked(io.RawIOBase):
    """A file read into the bundle: exactly the size and sha256 measured before, or the export fails (it changed)."""

    def __init__(self, handle: IO[bytes], path: Path, size: int, sha256: str) -> None:
        self.handle, self.path, self.size, self.sha256 = handle, path, size, sha256
        self.digest = hashlib.sha256()
        self.seen = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        self.seen += len(data)
        return data

    def finish(self) -> None:
        """Refuse a file that changed (grew, shrank, or other bytes) since it was measured."""
        if self.handle.read(1) or self.seen != self.size or self.digest.hexdigest() != self.sha256:
            raise BundleError(f"{self.path} changed while it was exported")


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o600
    tar.addfile(info, io.BytesIO(data))


def _write(
    out: Path, manifest: dict[str, Any], competition: bytes, rows: dict[str, bytes], folder: Path, files: list[tuple[PurePosixPath, int, str]]
) -> None:
    """The bundle, written to a 0600 temporary file beside ``out``, flushed, then renamed over it."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)  # mkstemp: 0600
    try:
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tar:
                _add(tar, MANIFEST, (jsonio.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii"))
                _add(tar, COMPETITION_FILE, competition)
                for table, data in rows.items():
                    _add(tar, f"{ROWS}/{table}.jsonl", data)
                for relative, size, sha256 in files:
                    path = folder / relative
                    info = tarfile.TarInfo(f"{FILES}/{relative.as_posix()}")
                    info.size, info.mode = size, 0o600
                    with path.open("rb") as handle:
                        checked = _Checked(handle, path, size, sha256)
                        tar.addfile(info, checked)  # type: ignore[arg-type]  # tarfile reads exactly info.size bytes
                        checked.finish()
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
