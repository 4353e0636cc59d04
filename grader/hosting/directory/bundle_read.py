"""Reading a competition bundle: untrusted input, read twice.

The first reading (:func:`read_bundle`) writes nothing: the manifest first (bounded, its shape checked), then every
member: a plain file (no link, no device, no folder entry), named as the manifest names it (relative, no ``..``), once,
of the size it declares, with the sha256 it declares; the rows are parsed (bounded) and kept; the files are only
hashed. Nothing else may be in the bundle, and nothing the manifest lists may be missing.

The second (:func:`extract_files`) copies the files into a fresh folder the importer made, hashing them again as they
are written (a bundle replaced between the two readings is caught there; the importer then removes the folder).
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from grader import jsonio
from grader.hosting.directory.bundle_format import (
    COMPETITION_FILE,
    FILES,
    FORMAT,
    MANIFEST,
    MAX_COMPETITION_FILE_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_MEMBERS,
    MAX_ROW_BYTES,
    MAX_ROWS_BYTES,
    MAX_TOTAL_BYTES,
    ROWS,
    VERSION,
    BundleError,
    bundle_tables,
    carried_file,
    member_path,
)
from grader.hosting.directory.layout import NAME

CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class Bundle:
    """A bundle read and checked: its manifest's facts, the competition file, every table's rows, the files' list."""

    path: Path
    name: str
    schema_revision: str
    grader: str
    competition_file: bytes
    #: table -> its rows, each a dict of column name -> the bundle's (encoded) value
    rows: dict[str, list[dict[str, Any]]]
    #: files/<path> members: relative path inside the competition folder -> (bytes, sha256)
    files: dict[PurePosixPath, tuple[int, str]] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _digest in self.files.values())


#: A PAX extended header or a GNU long name is read whole into memory by tarfile: bounded before it is read.
MAX_HEADER_BYTES = 64 << 10


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header whose extended headers (PAX, GNU long names) are refused above :data:`MAX_HEADER_BYTES`:
    tarfile would read one of any size into memory, and a few compressed bytes can declare gigabytes."""

    def _proc_pax(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
        _bounded_header(self)
        return super()._proc_pax(tarfile)  # type: ignore[misc,no-any-return]

    def _proc_gnulong(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
        _bounded_header(self)
        return super()._proc_gnulong(tarfile)  # type: ignore[misc,no-any-return]


def _bounded_header(info: tarfile.TarInfo) -> None:
    if info.size > MAX_HEADER_BYTES:
        raise BundleError(f"a bundle's extended tar header of {info.size} bytes (at most {MAX_HEADER_BYTES}): not a bundle this grader wrote")


@contextmanager
def _members(path: Path) -> Iterator[Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]]:
    """The bundle's members in order, as a stream (no seeking: a member is read once, as it comes)."""
    try:
        with tarfile.open(path, mode="r|gz", tarinfo=_BoundedTarInfo) as tar:

            def walk() -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
                for count, info in enumerate(tar, start=1):
                    if count > MAX_MEMBERS + 1:
                        raise BundleError(f"{path}: more than {MAX_MEMBERS} members")
                    plain = info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) and info.sparse is None
                    yield info, tar.extractfile(info) if plain else None

            yield walk()
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as error:
        raise BundleError(f"{path}: not a bundle this grader can read: {error}") from None


def _read_exact(handle: IO[bytes] | None, size: int, name: str) -> bytes:
    assert handle is not None
    data = handle.read(size + 1)
    if len(data) != size:
        raise BundleError(f"bundle member {name}: {len(data)} bytes, the manifest says {size}")
    return data


def _check_member(info: tarfile.TarInfo, declared: dict[str, tuple[int, str]], seen: set[str]) -> tuple[int, str]:
    """The member ``info`` as the manifest declares it, or one line saying why it is refused."""
    member_path(info.name)
    if info.type not in (tarfile.REGTYPE, tarfile.AREGTYPE) or info.sparse is not None:
        raise BundleError(f"bundle member {info.name}: not a plain file (a bundle holds no links, devices, folders or sparse files)")
    if info.name not in declared:
        raise BundleError(f"bundle member {info.name}: not listed in the manifest")
    if info.name in seen:
        raise BundleError(f"bundle member {info.name}: twice in the bundle")
    seen.add(info.name)
    size, sha256 = declared[info.name]
    if info.size != size:
        raise BundleError(f"bundle member {info.name}: {info.size} bytes, the manifest says {size}")
    return size, sha256


def _manifest(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        manifest = jsonio.loads(raw, max_bytes=MAX_MANIFEST_BYTES)
    except jsonio.JsonError as error:
        raise BundleError(f"{path}: its manifest is not JSON this grader wrote: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{path}: not a competition bundle (its manifest names no format {FORMAT!r})")
    if manifest.get("version") != VERSION:
        raise BundleError(f"{path}: bundle format version {manifest.get('version')!r}; this grader reads version {VERSION}")
    name = manifest.get("competition")
    if not isinstance(name, str) or not NAME.match(name):
        raise BundleError(f"{path}: the manifest names no competition this grader can serve")
    if not isinstance(manifest.get("schema_revision"), str) or not isinstance(manifest.get("grader"), str):
        raise BundleError(f"{path}: the manifest names no schema revision or grader")
    tables, members = manifest.get("tables"), manifest.get("members")
    known = {table.name for table in bundle_tables()}
    if not isinstance(tables, dict) or set(tables) != known or not all(type(n) is int and n >= 0 for n in tables.values()):
        raise BundleError(f"{path}: the manifest's tables are not the {len(known)} tables of a competition")
    if not isinstance(members, list) or len(members) > MAX_MEMBERS:
        raise BundleError(f"{path}: the manifest lists no members, or more than {MAX_MEMBERS}")
    return manifest


def _declared(manifest: dict[str, Any], path: Path) -> dict[str, tuple[int, str]]:
    """Each listed member's size and sha256; the names unique, in their place, the sizes within the bounds."""
    declared: dict[str, tuple[int, str]] = {}
    tables = {f"{ROWS}/{table}.jsonl" for table in manifest["tables"]}
    for member in manifest["members"]:
        if not isinstance(member, dict) or set(member) != {"name", "bytes", "sha256"}:
            raise BundleError(f"{path}: a manifest member is not {{name, bytes, sha256}}")
        name, size, sha256 = member["name"], member["bytes"], member["sha256"]
        if not isinstance(name, str) or type(size) is not int or size < 0 or not isinstance(sha256, str) or not _SHA256.match(sha256):
            raise BundleError(f"{path}: a manifest member has no name, size or sha256")
        relative = member_path(name)
        if name in declared:
            raise BundleError(f"{path}: the manifest lists {name} twice")
        in_place = (
            name == COMPETITION_FILE
            or name in tables
            or (relative.parts[0] == FILES and len(relative.parts) > 1 and carried_file(PurePosixPath(*relative.parts[1:])))
        )
        if not in_place:
            raise BundleError(f"bundle member {name}: not a member a bundle holds (competition.toml, rows/<table>.jsonl, files/<carried path>)")
        declared[name] = (size, sha256)
    missing = ({COMPETITION_FILE} | tables) - set(declared)
    if missing:
        raise BundleError(f"{path}: the manifest lacks {', '.join(sorted(missing))}")
    if sum(size for name, (size, _d) in declared.items() if name in tables) > MAX_ROWS_BYTES:
        raise BundleError(f"{path}: its rows hold more than {MAX_ROWS_BYTES} bytes")
    if declared[COMPETITION_FILE][0] > MAX_COMPETITION_FILE_BYTES:
        raise BundleError(f"{path}: its competition file is larger than {MAX_COMPETITION_FILE_BYTES} bytes")
    if sum(size for size, _d in declared.values()) > MAX_TOTAL_BYTES:
        raise BundleError(f"{path}: its members hold more than {MAX_TOTAL_BYTES} bytes")
    return declared


def _rows(table: str, data: bytes, count: int, path: Path) -> list[dict[str, Any]]:
    columns = {column.name for column in next(t for t in bundle_tables() if t.name == table).columns}
    rows = []
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            row = jsonio.loads(line, max_bytes=MAX_ROW_BYTES)
        except jsonio.JsonError as error:
            raise BundleError(f"{path}: rows/{table}.jsonl:{number}: {error}") from None
        if not isinstance(row, dict) or set(row) != columns:
            raise BundleError(f"{path}: rows/{table}.jsonl:{number}: not a row of {table} (its columns differ)")
        rows.append(row)
    if len(rows) != count:
        raise BundleError(f"{path}: rows/{table}.jsonl holds {len(rows)} rows, the manifest says {count}")
    return rows


def read_bundle(path: Path) -> Bundle:
    """Read and check the whole bundle at ``path``, writing nothing (see the module's docstring)."""
    seen: set[str] = set()
    kept: dict[str, bytes] = {}
    with _members(path) as members:
        first = next(members, None)
        if first is None or first[0].name != MANIFEST or first[1] is None or first[0].size > MAX_MANIFEST_BYTES:
            raise BundleError(f"{path}: not a competition bundle (its first member is not {MANIFEST})")
        manifest = _manifest(_read_exact(first[1], first[0].size, MANIFEST), path)
        declared = _declared(manifest, path)
        for info, handle in members:
            size, sha256 = _check_member(info, declared, seen)
            assert handle is not None
            if info.name.startswith(f"{FILES}/"):
                digest = hashlib.sha256()
                while chunk := handle.read(CHUNK):
                    digest.update(chunk)
                actual = digest.hexdigest()
            else:
                kept[info.name] = _read_exact(handle, size, info.name)
                actual = hashlib.sha256(kept[info.name]).hexdigest()
            if actual != sha256:
                raise BundleError(f"bundle member {info.name}: its sha256 is not the manifest's (the bundle was altered or damaged)")
    missing = set(declared) - seen
    if missing:
        raise BundleError(f"{path}: {len(missing)} member(s) the manifest lists are missing, {sorted(missing)[0]} first")
    rows = {table: _rows(table, kept[f"{ROWS}/{table}.jsonl"], count, path) for table, count in manifest["tables"].items()}
    files = {PurePosixPath(*member_path(n).parts[1:]): v for n, v in declared.items() if n.startswith(f"{FILES}/")}
    return Bundle(path, manifest["competition"], manifest["schema_revision"], manifest["grader"], kept[COMPETITION_FILE], rows, files)


def extract_files(bundle: Bundle, folder: Path) -> None:
    """Copy the bundle's files into ``folder`` (new, empty, the importer's), 0600 in 0700 folders, each checked again
    against the sha256 read the first time; :class:`BundleError` on any difference (the caller removes ``folder``)."""
    written: set[PurePosixPath] = set()
    with _members(bundle.path) as members:
        for info, handle in members:
            if not info.name.startswith(f"{FILES}/"):
                continue
            relative = PurePosixPath(*member_path(info.name).parts[1:])
            declared = bundle.files.get(relative)
            if declared is None or handle is None or info.size != declared[0] or relative in written:
                raise BundleError(f"{bundle.path}: changed since it was read (member {info.name})")
            target = folder.joinpath(*relative.parts)
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            digest = hashlib.sha256()
            # O_EXCL | O_NOFOLLOW: a fresh file, never through a link (the folder is new, and holds none)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                while chunk := handle.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if digest.hexdigest() != declared[1]:
                raise BundleError(f"bundle member {info.name}: its sha256 is not the manifest's (the bundle changed since it was read)")
            written.add(relative)
    if written != set(bundle.files):
        raise BundleError(f"{bundle.path}: changed since it was read (members missing)")
