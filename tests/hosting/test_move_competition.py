"""Moving a competition between servers: `grader admin competition export NAME --out BUNDLE` and `import BUNDLE`.

Through real servers over real sockets: the competition of grader 0.3.0's real state folder (tests/data/legacy_state_v0_3:
scored submissions, signed reports, a log), upgraded, served on SQLite, retired and exported; imported into a server on
PostgreSQL that already serves another competition (and registers a remote worker of the same name under another
token); served there with the same board bytes, its log auditing with `grader log audit`, its reports verifying under
the key that signed them, its participants' tokens opening it; then exported from PostgreSQL and imported into a third
server on SQLite, the same again. And the refusals, each one line, each leaving the target as it was.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import stat
import tarfile
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.hosting.directory.layout import ServerLayout, competition_schema
from grader.reports.keys import load_public_key
from grader.reports.verify import verify_report_file
from tests.hosting.support import REPO, ManyServer, admin, grader_cli, wait_for, write_competition

DATA = REPO / "tests" / "data" / "legacy_state_v0_3"
NAME = "legacy-v0-3"


def _source(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """The legacy state folder copied and upgraded into a server holding its competition; its competitions folder and manifest."""
    state = tmp_path / "source"
    shutil.copytree(DATA / "state", state)
    for key in (state / "keys").iterdir():
        key.chmod(0o600)
    files = tmp_path / "source-competitions"
    files.mkdir()
    shutil.copy(DATA / "competition.toml", files / "legacy.toml")
    admin(state, "upgrade-state", "--competition", str(files / "legacy.toml"))
    return state, files, json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))


def refused(state: Path, *args: str, database: str | None = None) -> str:
    """Run `grader admin --state STATE ARGS...` expecting a refusal: its one line (stderr)."""
    extra = ["--database", database] if database else []
    result = CliRunner().invoke(cli, ["admin", "--state", str(state), *extra, *args], catch_exceptions=False)
    assert result.exit_code != 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def served_copy(server: ManyServer, tmp_path: Path, tokens: dict[str, str], scored: str, label: str, *, cli: bool) -> bytes:
    """What the moved competition's server shows and proves: its board's bytes (returned), a log that audits, the
    reports verifying under the key that signed them, the old token opening it (``cli``: also through `grader status`
    and `grader verify`, as a participant would)."""
    base = server.base(NAME)
    board = httpx.get(f"{base}/api/v1/leaderboard", timeout=30)
    assert board.status_code == 200
    vkey = httpx.get(f"{base}/log/key", timeout=30).text.strip()
    audit = grader_cli("log", "audit", f"{base}/log", "--log-key", vkey, env={"XDG_STATE_HOME": str(tmp_path / f"auditor-{label}")}, timeout=120)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    key = tmp_path / f"host-{label}.pub"
    key.write_bytes(httpx.get(f"{base}/host-key.pub", timeout=30).content)
    assert key.read_bytes() == (DATA / "state" / "keys" / "grader.pub").read_bytes()  # the key that signed them, moved with them
    folder = server.state / "competitions" / NAME
    envelopes = sorted((folder / "results").rglob("*.dsse.json"))
    assert len(envelopes) == 7
    for envelope in envelopes:
        verify_report_file(envelope, load_public_key(key))
    mine = httpx.get(f"{base}/api/v1/submissions", headers={"Authorization": f"Bearer {tokens['alice']}"}, timeout=30)
    assert mine.status_code == 200 and scored in {s["id"] for s in mine.json()}
    report = tmp_path / f"report-{label}.json"
    if cli:
        got = grader_cli("status", scored, "--report", str(report), "--server", base, env={"GRADER_TOKEN": tokens["alice"]})
        assert got.returncode == 0, got.stderr
        assert grader_cli("verify", str(report), "--key", str(key)).returncode == 0
    # the folder is the host's alone, as a server keeps it
    for path in folder.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    return board.content


@pytest.mark.slow
def test_a_competition_moves_from_sqlite_to_postgresql_and_back(tmp_path: Path, postgres_cluster) -> None:  # type: ignore[no-untyped-def]
    source, source_files, manifest = _source(tmp_path)
    tokens = {p["name"]: p["token"] for p in manifest["participants"]}
    scored = next(s["id"] for s in manifest["submissions"] if s["participant"] == "alice" and s["state"] == "scored")
    admin(source, "--in", NAME, "add-worker", "gpu-01")  # a remote worker, whose name the target holds under another token
    server = ManyServer(source_files, source, workers=0).start()
    try:
        board = httpx.get(f"{server.base(NAME)}/api/v1/leaderboard", timeout=30).content
        assert b'"alice"' in board
    finally:
        server.stop()

    # a served competition is not exported: it could change while read
    assert "is served: retire it first" in refused(source, "competition", "export", NAME, "--out", str(tmp_path / "early.bundle"))
    admin(source, "competition", "retire", NAME)
    bundle = tmp_path / "sqlite.bundle"
    said = admin(source, "competition", "export", NAME, "--out", str(bundle))
    assert said.startswith(f"exported competition '{NAME}' to {bundle}: ") and "it holds the competition's keys" in said
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o600
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert names[0] == "manifest.json" and "files/keys/grader.key" in names and "rows/log_entries.jsonl" in names
    assert not any(n.endswith(".sqlite3") or n.startswith(("files/run/", "files/worker-data/")) for n in names)

    # the target: PostgreSQL, already serving another competition, whose remote worker gpu-01 holds another token
    url = postgres_cluster.new_database()
    target = tmp_path / "target"
    target_files = tmp_path / "target-competitions"
    target_files.mkdir()
    admin(target, "competition", "add", str(write_competition(target_files / "other.toml", name="other")), database=url)
    admin(target, "--in", "other", "add-worker", "gpu-01", database=url)
    # imported while the target serves: it serves the competition within seconds, as one `competition add` adds
    moved_file = tmp_path / "legacy-on-target.toml"  # the target's copy, outside its --competitions folder
    shutil.copy(DATA / "competition.toml", moved_file)
    server = ManyServer(target_files, target, workers=0, database=url).start()
    try:
        # a bundle that fails its checks once its rows are in: the new schema is dropped, the folder removed
        with tarfile.open(bundle) as tar:
            checkpoint = tar.extractfile("files/log/checkpoint").read()  # type: ignore[union-attr]
        rewound = _rewrite(bundle, tmp_path / "rewound.bundle", {"files/log/checkpoint": checkpoint.replace(b"\n12\n", b"\n11\n", 1)})
        assert "its log does not audit" in refused(target, "competition", "import", str(rewound), "--competition", str(moved_file), database=url)
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (competition_schema(NAME),)
            ).fetchone() == (0,)
        assert sorted(p.name for p in (target / "competitions").iterdir()) == ["other"]
        args = ["admin", "--state", str(target), "--database", url, "competition", "import", str(bundle), "--competition", str(moved_file)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"imported competition '{NAME}': ")
        assert "log: 12 entries, checkpoint of 12 verified; 7 reports verify under its host key" in result.stdout
        assert "worker 'gpu-01': this server registers that name under another token; kept for its reports, revoked here" in result.stderr
        schema = competition_schema(NAME)
        with psycopg.connect(url, autocommit=True) as conn:
            workers = conn.execute(f'SELECT name, revoked_at IS NOT NULL FROM "{schema}".workers ORDER BY name').fetchall()
            assert workers == [("gpu-01", True), ("local-1", False)]
            assert conn.execute(f'SELECT count(*) FROM "{schema}".log_entries').fetchone() == (12,)
            assert conn.execute(f'SELECT count(*) FROM "{competition_schema("other")}".participants').fetchone() == (0,)
            # ids continue after the imported ones (the sequences were set past them)
            assert conn.execute(f"SELECT nextval(pg_get_serial_sequence('\"{schema}\".results', 'id'))").fetchone() == (5,)
        wait_for(lambda: httpx.get(f"{server.base(NAME)}/api/v1/competition", timeout=30).status_code == 200, timeout=60, what="served")
        assert served_copy(server, tmp_path, tokens, scored, "pg", cli=True) == board
        bob = httpx.get(f"{server.base('other')}/api/v1/submissions", headers={"Authorization": f"Bearer {tokens['bob']}"}, timeout=30)
        assert bob.status_code == 404  # a person now, registered in the moved competition only
    finally:
        server.stop()

    # and back: exported from PostgreSQL, imported into a new server on SQLite
    admin(target, "competition", "retire", NAME, database=url)
    # without the server's --database, no empty SQLite file stands in for its rows
    assert "is kept in PostgreSQL" in refused(target, "competition", "export", NAME, "--out", str(tmp_path / "none.bundle"))
    assert not (target / "competitions" / NAME / "grader.sqlite3").exists()
    back = tmp_path / "pg.bundle"
    admin(target, "competition", "export", NAME, "--out", str(back), database=url)
    third = tmp_path / "third"
    admin(third, "competition", "import", str(back), "--competition", str(moved_file))
    assert (third / "competitions" / NAME / "grader.sqlite3").is_file()
    server = ManyServer(tmp_path / "third-competitions", third, workers=0).start()
    try:
        assert served_copy(server, tmp_path, tokens, scored, "sqlite", cli=False) == board
    finally:
        server.stop()


def _rewrite(bundle: Path, out: Path, change: dict[str, bytes | None], *, restate: bool = True, extra: tarfile.TarInfo | None = None) -> Path:
    """A copy of ``bundle`` with members changed (None: removed); ``restate``: the manifest's digests follow the change
    (a consistent bundle of other contents), else they stay (an altered one); ``extra``: a member added as it is."""
    with tarfile.open(bundle) as tar:
        members = [(info.name, tar.extractfile(info).read()) for info in tar.getmembers()]  # type: ignore[union-attr]
    contents = {name: data for name, data in members}
    for name, data in change.items():
        if data is None:
            contents.pop(name)
        else:
            contents[name] = data
    manifest = json.loads(contents["manifest.json"])
    if restate:
        manifest["members"] = [
            {"name": n, "bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in contents.items() if n != "manifest.json"
        ]
    contents["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(out, "w:gz") as tar:
        for name in ["manifest.json", *[n for n in contents if n != "manifest.json"]]:
            info = tarfile.TarInfo(name)
            info.size = len(contents[name])
            tar.addfile(info, io.BytesIO(contents[name]))
        if extra is not None:
            tar.addfile(extra)
    return out


@pytest.mark.slow  # nothing started, but seconds of upgrading, exporting and importing (10 s on a loaded machine): not the fast loop
def test_refusals_each_one_line_and_nothing_written(tmp_path: Path) -> None:
    source, files, _manifest = _source(tmp_path)
    admin(source, "competition", "retire", NAME)
    bundle = tmp_path / "b.bundle"
    admin(source, "competition", "export", NAME, "--out", str(bundle))
    competition = str(files / "legacy.toml")
    target = tmp_path / "target"
    target.mkdir()
    ServerLayout(target.resolve()).save()  # a server of none yet, with people
    admin(target, "person", "add", "carol")

    def listing() -> list[Path]:  # SQLite's -wal and -shm come and go with connections: not the import's
        return sorted(p.relative_to(target) for p in target.rglob("*") if not p.name.endswith(("-wal", "-shm")))

    before = listing()

    def refused_import(path: Path, competition_file: str = competition) -> str:
        line = refused(target, "competition", "import", str(path), "--competition", competition_file)
        assert listing() == before, line  # nothing half-written
        return line

    with tarfile.open(bundle) as tar:
        rows = tar.extractfile("rows/pins.jsonl").read()  # type: ignore[union-attr]
        member = next(n for n in tar.getnames() if n.endswith("/1/report.dsse.json"))
        envelope = tar.extractfile(member).read()  # type: ignore[union-attr]
    altered = _rewrite(bundle, tmp_path / "altered.bundle", {member: envelope.replace(b'"', b" ", 1)}, restate=False)
    assert f"bundle member {member}: its sha256 is not the manifest's" in refused_import(altered)
    link = tarfile.TarInfo("files/keys/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    assert "files/keys/evil: not a plain file" in refused_import(_rewrite(bundle, tmp_path / "link.bundle", {}, extra=link))
    bomb = tarfile.TarInfo("files/keys/bomb")  # a PAX header tarfile would read whole into memory
    bomb.pax_headers = {"comment": "x" * (1 << 20)}
    assert "extended tar header of" in refused_import(_rewrite(bundle, tmp_path / "bomb.bundle", {}, extra=bomb))
    climb = _rewrite(bundle, tmp_path / "climb.bundle", {"files/keys/../../../escape": b"x"})
    assert "not a relative path this grader writes" in refused_import(climb)
    other = _rewrite(bundle, tmp_path / "other.bundle", {"rows/pins.jsonl": rows.replace(NAME.encode(), b"someone-else")})
    assert "it holds rows of competition 'someone-else', not only of 'legacy-v0-3'; refused" in refused_import(other)
    # consistent bundles whose contents do not check out: found once the rows and files are in, and all of it removed
    forged = _rewrite(bundle, tmp_path / "forged.bundle", {member: envelope.replace(b'"signatures"', b'"signatures" ', 1)[:-40] + b"A" * 40})
    assert "a report does not verify under its host key" in refused_import(forged)
    with tarfile.open(bundle) as tar:
        checkpoint = tar.extractfile("files/log/checkpoint").read()  # type: ignore[union-attr]
    rewound = _rewrite(bundle, tmp_path / "rewound.bundle", {"files/log/checkpoint": checkpoint.replace(b"\n12\n", b"\n11\n", 1)})
    assert "its log does not audit" in refused_import(rewound)
    renamed = write_competition(tmp_path / "renamed.toml", name="renamed")
    assert f"names competition 'renamed'; the bundle holds '{NAME}'" in refused_import(bundle, str(renamed))

    # a participant's name held by another person here: receipts commit names, so the import is refused
    admin(target, "person", "add", "alice")
    before = listing()
    said = refused_import(bundle)
    assert (
        said == "error: participant 'alice': the name belongs to another person on this server (receipts commit participants' names); import refused"
    )
    admin(target, "person", "revoke", "alice")  # revoked is still someone else's name
    before = listing()
    assert "participant 'alice': the name belongs to another person" in refused_import(bundle)

    # a name the server has already (here: the source itself, where the competition was retired, not removed)
    assert f"competition '{NAME}' is already on this server (retired); a name is never reused" in refused(
        source, "competition", "import", str(bundle), "--competition", competition
    )
