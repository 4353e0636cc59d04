"""``grader admin``: the host's commands, run against the competition's state folder (or database URL)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from grader import jsonio
from grader.cli.options import competition_file_option
from grader.hosting.clock import iso
from grader.text import bounded

if TYPE_CHECKING:
    from grader.hosting.db.session import Database


def shown(text: str | None) -> str:
    """Text a participant (or a worker) wrote, escaped and bounded for the host's terminal."""
    return "" if text is None else bounded(text, 200)


def _db(ctx: click.Context):  # type: ignore[no-untyped-def]
    from grader.hosting.db.session import DB_FILE, open_database
    from grader.hosting.errors import HostingError

    state: Path = ctx.obj["state"]
    if ctx.obj["database"] is None and not (state / DB_FILE).is_file():
        # A mistyped --state must not silently create a second, empty competition.
        raise HostingError(
            f"{state}: no competition database here",
            hint="pass the server's --database URL or set GRADER_DATABASE (and --state or GRADER_STATE): in a new shell, "
            "source the environment file first (docs/deploy.md); on a new state folder, start `grader serve --state DIR` once",
        )
    return open_database(state, ctx.obj["database"])


def _log(ctx: click.Context):  # type: ignore[no-untyped-def]
    """The state folder's transparency log (None before the first `grader serve`): admin events are logged too."""
    from grader.hosting.transparency.log_store import open_host_log

    return open_host_log(ctx.obj["state"])


#: Commands of the server itself, run against its state folder (not one competition's).
SERVER_COMMANDS = frozenset({"upgrade-state", "competition", "person"})


@click.group("admin")
@click.option("--state", "state_dir", required=True, type=click.Path(path_type=Path), envvar="GRADER_STATE", help="The server's state folder.")
@click.option("--database", default=None, envvar="GRADER_DATABASE", help="Database URL, if the server uses one.")
@click.option(
    "--in",
    "competition_name",
    default=None,
    envvar="GRADER_IN",
    metavar="NAME",
    help="The competition, on a server of many (default: its only one).",
)
@click.pass_context
def admin(ctx: click.Context, state_dir: Path, database: str | None, competition_name: str | None) -> None:
    """Manage a hosted competition: participants, submissions, the clock, pins."""
    ctx.obj = {"server_state": state_dir, "server_database": database, "state": state_dir, "database": database}
    if ctx.invoked_subcommand in SERVER_COMMANDS:
        return
    from grader.hosting.directory.layout import ServerLayout, is_server_layout
    from grader.hosting.errors import HostingError

    if is_server_layout(state_dir):
        from grader.hosting.directory.databases import competition_database

        layout = ServerLayout(state_dir).load()
        entry = layout.pick(competition_name)
        ctx.obj.update(state=layout.folder(entry.name), database=competition_database(entry, database), competition_name=entry.name)
    elif competition_name is not None:
        raise HostingError(f"{state_dir}: the state folder of a one-competition server; --in names a competition of a server of many")


@admin.command("add-participant")
@click.argument("name")
@click.option("--team", default=None)
@click.option("--baseline", is_flag=True, help="A host baseline (shown with a badge, never ranked).")
@click.pass_context
def add_participant(ctx: click.Context, name: str, team: str | None, baseline: bool) -> None:
    """Create participant NAME and print its token (shown once; only its hash is stored).

    On a server of many competitions, NAME is a person of the server registered in this competition: a person new to
    the server gets a token (printed), one already known keeps theirs (nothing printed on stdout).
    """
    from grader.hosting.services import admin as service

    if "competition_name" in ctx.obj:
        from grader.hosting.directory.people import People, open_people
        from grader.hosting.services.people import register

        people = People(open_people(ctx.obj["server_state"], ctx.obj["server_database"]))
        registered = register(people, _db(ctx), name, team, baseline=baseline)
        if registered is None:
            click.echo(f"person {name!r} registered in {ctx.obj['competition_name']!r}; their token is the one they already hold", err=True)
            return
        click.echo(registered)
        click.echo(
            f"person {name!r} added to the server and registered in {ctx.obj['competition_name']!r}; give them the token printed on stdout "
            "(it opens every competition they are registered in; it is not stored and cannot be shown again)",
            err=True,
        )
        return
    token = service.add_participant(_db(ctx), name, team, baseline=baseline)
    click.echo(token)
    click.echo(f"participant {name!r} added; give them the token printed on stdout (it is not stored and cannot be shown again)", err=True)


@admin.command("revoke")
@click.argument("name")
@click.pass_context
def revoke(ctx: click.Context, name: str) -> None:
    """Revoke participant NAME's token."""
    from grader.hosting.services import admin as service

    service.revoke_participant(_db(ctx), name)
    click.echo(f"revoked {name!r}")


@admin.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_participants(ctx: click.Context, as_json: bool) -> None:
    """List participants with their submission counts."""
    from grader.hosting.services import admin as service

    rows = service.participant_rows(_db(ctx))
    if as_json:
        click.echo(jsonio.dumps([asdict(row) for row in rows], indent=2, ensure_ascii=True))
        return
    for row in rows:
        # Names were written by people (older rows predate intake's refusal of controls): escaped before the terminal.
        click.echo(
            f"{shown(row.name):<24} team={shown(row.team) or '-':<16} submissions={row.submissions:<4} {'REVOKED' if row.revoked else 'active'}"
        )


@admin.command("submissions")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_submissions(ctx: click.Context, as_json: bool) -> None:
    """Every submission with its state (host view)."""
    from grader.hosting.services import admin as service

    rows = service.submission_rows(_db(ctx))
    if as_json:
        click.echo(jsonio.dumps([asdict(row) for row in rows], indent=2, ensure_ascii=True))
        return
    for r in rows:
        click.echo(f"{r.id}  {shown(r.participant):<16} {r.track:<6} {r.state:<9} {r.failure_code or '':<14} attempt {r.attempt}  {shown(r.name)}")


@admin.command("runs")
@competition_file_option("The competition file, for its [retention] policy")
@click.pass_context
def runs(ctx: click.Context, competition_file: Path | None) -> None:
    """The workers' compact runs the server keeps (for re-scoring): how many, the bytes they hold, and what the retention policy removes."""
    from grader.hosting.services import admin as service
    from grader.hosting.storage import StateDir, recorded_competition_file

    submissions, count, size = StateDir(ctx.obj["state"]).runs_held()
    click.echo(f"{count} compact run(s) of {submissions} submission(s): {size} bytes ({size / 1e6:.1f} MB) in {ctx.obj['state'] / 'runs'}")
    if competition_file is None and recorded_competition_file(ctx.obj["state"]) is None:
        click.echo("retention: pass --competition FILE to see what its [retention] policy removes")
        return
    click.echo(service.runs_plan(_db(ctx), ctx.obj["state"], _competition(competition_file, ctx)).summary())


@admin.command("export-worker-data")
@click.option(
    "--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False), help="A new (or empty) folder to write the copy to."
)
@click.option("--competition", "competition_file", type=click.Path(path_type=Path, dir_okay=False), envvar="GRADER_COMPETITION", default=None)
@click.pass_context
def export_worker_data(ctx: click.Context, out_dir: Path, competition_file: Path | None) -> None:
    """The data a remote worker grades on: corpus and judged queries under pseudonymous ids, no judgements (docs/deploy.md)."""
    from grader.hosting.services.worker_copy import export_copy

    written = export_copy(ctx.obj["state"], _competition(competition_file, ctx), out_dir)
    for name, task in written.items():
        click.echo(f"{name}: {task.documents} documents, {task.queries} queries (pseudonymous ids, no judgements)")
    click.echo(f"wrote {out_dir}; copy it to each worker and start it with --data DIR (or GRADER_WORKER_DATA)")


@admin.command("history")
@click.argument("submission_id")
@click.pass_context
def history(ctx: click.Context, submission_id: str) -> None:
    """The audit trail of one submission."""
    from grader.hosting.services import admin as service

    rows = service.history(_db(ctx), submission_id)
    for t in rows:
        click.echo(f"{t.at}  {t.from_state or '-':>9} -> {t.to_state:<9} attempt {t.attempt}  {shown(t.actor)}: {shown(t.reason)}")
    if any("sha256" in t.reason for t in rows):
        click.echo(UPLOAD_DIGEST_NOTE)


#: Why the two digests of one submission differ (docs/hosting.md says it too).
UPLOAD_DIGEST_NOTE = (
    "note: the upload's sha256 is of the archive's bytes as sent; a report's subject digest is of the files inside it\n"
    "      (sha256 over `sha256sum` lines of every file, docs/reports.md), the same however it was packed, so the two differ."
)


def _competition(path: Path | None, ctx: click.Context | None = None):  # type: ignore[no-untyped-def]
    """The competition file given, else the one `grader serve` noted in the state folder."""
    from grader.hosting.config import load_competition
    from grader.hosting.errors import HostingError
    from grader.hosting.storage import recorded_competition_file

    if path is None and ctx is not None:
        path = recorded_competition_file(ctx.obj["state"])
    if path is None:
        raise HostingError(
            "which competition? no `grader serve` has run with this --state yet", hint="pass --competition FILE (or set GRADER_COMPETITION)"
        )
    return load_competition(path)


@admin.command("rejudge")
@click.argument("submission_id", required=False)
@click.option("--all", "everything", is_flag=True, help="Every scored or failed submission.")
@click.option("--max-attempts", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option(
    "--rescore",
    is_flag=True,
    help="Score the stored runs again against the data as it is now (a corrected qrels, a new measure): no worker runs anything.",
)
@competition_file_option("With --rescore: the competition file")
@click.pass_context
def rejudge(ctx: click.Context, submission_id: str | None, everything: bool, max_attempts: int, rescore: bool, competition_file: Path | None) -> None:
    """Grade SUBMISSION_ID (or --all) again; earlier results are kept. The server picks the jobs up.

    With --rescore nothing is graded again: the runs the workers returned are scored again on the server, each a new signed result.
    """
    from grader.errors import UsageError
    from grader.hosting.services import admin as service

    if bool(submission_id) == everything:
        raise UsageError("give one SUBMISSION_ID or --all")
    if rescore:
        _rescore(ctx, submission_id, competition_file)
        return
    done, missed = service.rejudge(_db(ctx), submission_id, max_attempts=max_attempts, host_log=_log(ctx))
    click.echo(f"queued {len(done)} submission(s) for rejudging" + (f"; not finished or unknown: {missed}" if missed else ""))


def _rescore(ctx: click.Context, submission_id: str | None, competition_file: Path | None) -> None:
    """``rejudge --rescore``: each re-scored submission on a line; refusals on stderr, then a non-zero exit."""
    from grader.hosting.errors import HostingError
    from grader.hosting.services import admin as service

    done, refused = service.rescore(_db(ctx), ctx.obj["state"], _competition(competition_file, ctx), submission_id, host_log=_log(ctx))
    for sid, result_id, score in done:
        click.echo(f"{sid}  re-scored: result {result_id}, score {'-' if score is None else repr(score)}")
    for line in refused:
        click.echo(f"refused: {bounded(line, 800)}", err=True)
    click.echo(f"re-scored {len(done)} submission(s)" + (f"; refused {len(refused)}" if refused else ""))
    if refused:
        raise HostingError(f"{len(refused)} submission(s) could not be re-scored (each named above)")


@admin.command("cancel")
@click.argument("submission_id")
@click.pass_context
def cancel(ctx: click.Context, submission_id: str) -> None:
    """Cancel a submission that has not ended (never charged to the participant)."""
    from grader.hosting.services import admin as service

    service.cancel(_db(ctx), submission_id, host_log=_log(ctx))
    click.echo(f"cancelled {submission_id}")


END_EFFECTS = (
    "Ending the competition now closes uploads and final choices (uploads completed before this moment still count),\n"
    "publishes the private leaderboard, participants' private and full scores and full signed reports,\n"
    "and reveals the partition secret. It cannot be undone: once revealed, the secret and the private scores stay public."
)


@admin.command("end")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (needed when not run on a terminal).")
@click.pass_context
def end(ctx: click.Context, yes: bool) -> None:
    """Close the competition now and reveal the private board and the partition secret. Cannot be undone.

    Asks for confirmation on a terminal; elsewhere needs --yes (exit 2 without it).
    """
    import sys

    from grader.errors import UsageError
    from grader.hosting.services import admin as service
    from grader.hosting.storage import recorded_competition_file

    db = _db(ctx)  # a wrong --state fails before the question
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("`grader admin end` reveals the private board and cannot be undone; pass --yes to confirm")
        click.echo(END_EFFECTS, err=True)
        if not click.confirm("End the competition now?", default=False, err=True):
            raise UsageError("not ended")
    host_log = _log(ctx)
    # The competition file names its phases: the ends of earlier ones that have come are logged before the end.
    competition = _competition(None, ctx) if host_log is not None and recorded_competition_file(ctx.obj["state"]) is not None else None
    now = service.end_now(db, host_log=host_log, competition=competition)
    click.echo(f"competition ended at {iso(now)}: private board, private scores and the partition secret are now public")
    # The reveal entry is the server's (its periodic pass, every few seconds), not this command's: it waits for the
    # grades received before the end, which only a running server finishes.
    click.echo("the server logs the reveal once no submission received before the end is in flight (if it cannot: `grader admin log-reveal`)")


@admin.command("repin")
@click.option("--competition", "competition_file", required=True, type=click.Path(path_type=Path))
@click.pass_context
def repin(ctx: click.Context, competition_file: Path) -> None:
    """Pin the benchmark data and grader version as they are now (after an intended change)."""
    from grader.hosting.services import admin as service

    click.echo(service.repin(_db(ctx), _competition(competition_file), host_log=_log(ctx)))


@admin.command("report")
@click.argument("submission_id")
@click.option("--out", "out_path", required=True, type=click.Path(path_type=Path))
@click.pass_context
def report(ctx: click.Context, submission_id: str, out_path: Path) -> None:
    """Copy the full signed report of SUBMISSION_ID (host view, any time)."""
    from grader.files import atomic_write_bytes
    from grader.hosting.services import admin as service

    atomic_write_bytes(out_path, service.full_report(_db(ctx), submission_id))
    click.echo(str(out_path))


@admin.command("leaderboard")
@click.option("--private", "private", is_flag=True, help="The private board (participants see it only after the end; the host at any time).")
@competition_file_option()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def leaderboard(ctx: click.Context, private: bool, competition_file: Path | None, as_json: bool) -> None:
    """The leaderboard as the server computes it (host view): with --private, the private board, also before the end."""
    from grader.hosting.leaderboard.host_view import board_text, host_board

    db = _db(ctx)
    data = host_board(ctx.obj["state"], db, _competition(competition_file, ctx), "private" if private else "public")
    click.echo(jsonio.dumps(data, indent=2, ensure_ascii=True) if as_json else board_text(data))


@admin.command("add-worker")
@click.argument("name")
@click.option(
    "--public-key",
    "public_key",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The worker's Ed25519 public key (PEM, grader.pub in its --key-dir); without it the worker's key is recorded at its first start.",
)
@click.option(
    "--same-token",
    is_flag=True,
    help="Register it under the token in GRADER_WORKER_TOKEN (printed when it was added to another competition of this server): "
    "one worker serving several competitions. Nothing is printed.",
)
@click.pass_context
def add_worker(ctx: click.Context, name: str, public_key: Path | None, same_token: bool) -> None:
    """Register remote worker NAME and print its token (shown once; only its hash is stored)."""
    from grader.hosting.errors import HostingError
    from grader.hosting.services import admin as service

    pem = None
    if public_key is not None:
        try:
            pem = public_key.read_text(encoding="ascii")[:4000]
        except (OSError, UnicodeDecodeError) as error:
            raise HostingError(f"{public_key}: cannot read: {error}") from None
    if same_token:
        import os

        from grader.hosting.services.shared_workers import add_with_token

        add_with_token(_db(ctx), name, pem, os.environ.get("GRADER_WORKER_TOKEN", ""))
        click.echo(f"worker {name!r} added under the token it holds: it serves this competition too (grader worker --competition)", err=True)
        return
    token = service.add_worker(_db(ctx), name, pem)
    click.echo(token)
    click.echo(
        f"worker {name!r} added; run it with `grader worker --server URL --worker-token TOKEN` (the token is not stored and cannot be shown again)",
        err=True,
    )


@admin.command("revoke-worker")
@click.argument("name")
@click.pass_context
def revoke_worker(ctx: click.Context, name: str) -> None:
    """Revoke remote worker NAME: it can no longer claim jobs or post results (its running lease expires and is re-attempted)."""
    from grader.hosting.services import admin as service

    service.revoke_worker(_db(ctx), name)
    click.echo(f"revoked worker {name!r}")


@admin.command("reset-fingerprint")
@click.argument("name")
@click.pass_context
def reset_fingerprint(ctx: click.Context, name: str) -> None:
    """Clear the fingerprint bound to worker NAME (a worker moved to another machine): its next statement binds anew."""
    from grader.hosting.services import admin as service

    was = service.reset_fingerprint(_db(ctx), name)
    click.echo(f"fingerprint of worker {name!r} reset (was {(was or 'none')[:12]}); its next statement binds anew")


@admin.command("workers")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_workers(ctx: click.Context, as_json: bool) -> None:
    """Registered workers: local or remote, key recorded, jobs running now, bound fingerprint, replicas graded; FLAGGED when replicas
    disagreed with the majority; REFUSED when claims or statements named another fingerprint than the bound one."""
    from grader.hosting.services import admin as service

    rows = service.worker_rows(_db(ctx))
    if as_json:
        click.echo(jsonio.dumps([asdict(row) for row in rows], indent=2, ensure_ascii=True))
        return
    for r in rows:
        click.echo(
            f"{shown(r.name):<24} {'local' if r.local else 'remote':<6} key={'yes' if r.key else 'no ':<3} running={r.running} {'REVOKED' if r.revoked else 'active'}"
            f" fingerprint={(r.fingerprint or '-')[:12]} replicas={r.replicas}"
            + (f" FLAGGED: {r.dissents} replica(s) disagreed with the majority" if r.dissents else "")
            + (f" re-runs with two outputs for one input: {r.nondeterministic}" if r.nondeterministic else "")
            + (
                f" REFUSED: {r.fingerprint_refusals} claim(s) or statement(s) of another fingerprint (last {(r.fingerprint_refused or '-')[:12]})"
                if r.fingerprint_refusals
                else ""
            )
        )


@admin.command("metrics-token")
@click.pass_context
def metrics_token(ctx: click.Context) -> None:
    """Create (or replace) the token that reads /metrics; print it once (only its hash is stored)."""
    from grader.hosting.identity.auth import new_metrics_token

    token = new_metrics_token(_db(ctx))
    click.echo(token)
    click.echo("scrape /metrics with `Authorization: Bearer TOKEN` (the token is not stored and cannot be shown again)", err=True)


@admin.command("log-retract")
@click.argument("index", type=click.IntRange(1))
@click.option("--admin", "admin_name", required=True, help="Who retracts (named in the entry).")
@click.option("--reason", required=True, help="Why the entry no longer counts (named in the entry; at most 200 characters).")
@click.pass_context
def log_retract(ctx: click.Context, index: int, admin_name: str, reason: str) -> None:
    """Withdraw log entry INDEX by appending a retraction entry: the entry itself stays in the log (never a deletion)."""
    from grader.hosting.services import admin as service

    done = service.retract(_db(ctx), _log(ctx), index=index, admin=admin_name, reason=reason)
    click.echo(f"retraction of entry {index} logged as entry {done}")


@admin.command("log-reveal")
@competition_file_option()
@click.pass_context
def log_reveal(ctx: click.Context, competition_file: Path | None) -> None:
    """Log the reveal now, when the server's own reveal failed (the server logs it by itself after the end, once no
    submission received before the end is in flight): the partition secret, the identifier and blinding keys entry 0
    committed to, and the digests of the final public and private boards. Once."""
    from grader.hosting.services import admin as service

    index = service.reveal(_db(ctx), _log(ctx), ctx.obj["state"], _competition(competition_file, ctx))
    click.echo(f"reveal logged as entry {index}")


@admin.command("log-rewind")
@click.option(
    "--checkpoint", "checkpoint_file", required=True, help="The newest checkpoint the log published (its `checkpoint` file, from any mirror)."
)
@click.option("--admin", "admin_name", required=True, help="Who rewinds (named in the entry and the statement).")
@click.option("--reason", required=True, help="Why (named in the entry and the statement; at most 200 characters).")
@click.pass_context
def log_rewind(ctx: click.Context, checkpoint_file: str, admin_name: str, reason: str) -> None:
    """After a disaster: restart the log from the database's (older) state, openly. Logs a rewind entry naming the
    published checkpoint, signs a statement (kept in DIR/log/rewinds/, printed here: publish it) and publishes the
    new tree. Clients that saw the old checkpoint will see the fork, and this statement that explains it."""
    from grader.cli.log_fetch import read_bounded
    from grader.hosting.services import admin as service
    from grader.transparency.note import MAX_NOTE_BYTES

    note = read_bounded(checkpoint_file, MAX_NOTE_BYTES, "checkpoint")
    index, statement = service.rewind(_db(ctx), _log(ctx), note, admin=admin_name, reason=reason)
    click.echo(f"rewind logged as entry {index}; signed statement (publish it):")
    click.echo(statement.decode("utf-8"), nl=False)


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(admin)


@admin.command("upgrade-state")
@click.option(
    "--competition",
    "competition_file",
    default=None,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The competition file (default: the one the last `grader serve` noted in the state folder).",
)
@click.pass_context
def upgrade_state(ctx: click.Context, competition_file: Path | None) -> None:
    """Upgrade a one-competition state folder into a server holding that competition (stop the server first)."""
    from grader.hosting.directory.upgrade import is_legacy, upgrade
    from grader.hosting.errors import HostingError

    state: Path = ctx.obj["server_state"]
    if not is_legacy(state):
        raise HostingError(f"{state}: not the state folder of a one-competition server (nothing to upgrade)")
    layout = upgrade(state, ctx.obj["server_database"], competition_file)
    (entry,) = layout.active()
    click.echo(
        f"upgraded: competition {entry.name!r} now in {layout.folder(entry.name)}; serve with `grader serve --state {state} --competitions DIR`"
    )


@admin.group("competition")
def competition_group() -> None:
    """The competitions of a server of many: add, retire, list."""


@competition_group.command("add")
@click.argument("competition_file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.pass_context
def competition_add(ctx: click.Context, competition_file: Path) -> None:
    """Add the competition of COMPETITION_FILE (its start checks run now); a running server serves it within seconds."""
    from grader.hosting.serve_many import add_competition

    entry = add_competition(ctx.obj["server_state"], competition_file, ctx.obj["server_database"])
    click.echo(f"added competition {entry.name!r}: pages under /c/{entry.name}/, API under /api/v1/competitions/{entry.name}/")


@competition_group.command("retire")
@click.argument("name")
@click.pass_context
def competition_retire(ctx: click.Context, name: str) -> None:
    """Stop serving competition NAME (its folder and rows stay)."""
    from grader.hosting.serve_many import retire_competition

    retire_competition(ctx.obj["server_state"], name)
    click.echo(f"retired competition {name!r}: a running server stops serving it within seconds")


@competition_group.command("list")
@click.pass_context
def competition_list(ctx: click.Context) -> None:
    """The server's competitions: name, state, folder."""
    from grader.hosting.directory.layout import ServerLayout, is_server_layout
    from grader.hosting.errors import HostingError

    state: Path = ctx.obj["server_state"]
    if not is_server_layout(state):
        raise HostingError(f"{state}: not the state folder of a server of many competitions")
    layout = ServerLayout(state).load()
    for entry in sorted(layout.entries.values(), key=lambda e: e.name):
        click.echo(f"{entry.name:<24} {'retired ' + (entry.retired_at or '') if entry.retired else 'served':<30} {layout.folder(entry.name)}")


@competition_group.command("export")
@click.argument("name")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path, dir_okay=False), help="The bundle to write (0600: it holds the keys).")
@click.pass_context
def competition_export(ctx: click.Context, name: str, out: Path) -> None:
    """Write retired competition NAME (rows, keys, log, reports, runs) to a bundle another server imports."""
    from grader.hosting.directory.bundle_export import export_competition

    done = export_competition(ctx.obj["server_state"], name, out, ctx.obj["server_database"])
    click.echo(
        f"exported competition {name!r} to {done.path}: {done.rows} rows, {done.files} files; it holds the competition's keys: keep it as private"
    )


@competition_group.command("import")
@click.argument("bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--competition",
    "competition_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="This server's copy of the competition file (its benchmark paths are this machine's).",
)
@click.pass_context
def competition_import(ctx: click.Context, bundle: Path, competition_file: Path) -> None:
    """Add the competition of BUNDLE (from `competition export`), checked first; a running server serves it within seconds."""
    from grader.hosting.directory.bundle_import import import_competition
    from grader.hosting.services.startup import hold_the_end

    # the end its log holds stays: a file that moves it later is refused here, as a server refuses it at start
    done = import_competition(ctx.obj["server_state"], bundle, competition_file, ctx.obj["server_database"], hold=hold_the_end)
    for worker in done.revoked_workers:
        click.echo(f"worker {worker!r}: this server registers that name under another token; kept for its reports, revoked here", err=True)
    name = done.entry.name
    click.echo(
        f"imported competition {name!r}: {done.rows} rows, {done.files} files, {len(done.new_people)} new people; "
        f"log: {done.verified.entries} entries, checkpoint of {done.verified.checkpoint_size} verified; "
        f"{done.verified.reports} reports verify under its host key; pages under /c/{name}/"
    )


@admin.group("person")
def person_group() -> None:
    """The people of a server of many competitions: one token each, registered per competition."""


def _people(ctx: click.Context):  # type: ignore[no-untyped-def]
    from grader.hosting.directory.layout import is_server_layout
    from grader.hosting.directory.people import People, open_people
    from grader.hosting.errors import HostingError

    state: Path = ctx.obj["server_state"]
    if not is_server_layout(state):
        raise HostingError(f"{state}: not the state folder of a server of many competitions (people are its identities)")
    return People(open_people(state, ctx.obj["server_database"]))


@person_group.command("add")
@click.argument("name")
@click.pass_context
def person_add(ctx: click.Context, name: str) -> None:
    """Add person NAME to the server (registered in no competition yet) and print their token."""
    _person, token = _people(ctx).add(name)
    click.echo(token)
    click.echo(f"person {name!r} added; register them with `grader admin --in COMPETITION add-participant {name}`", err=True)


@person_group.command("list")
@click.pass_context
def person_list(ctx: click.Context) -> None:
    """The server's people."""
    for person in _people(ctx).all():
        click.echo(f"{shown(person.name):<24} {'REVOKED' if person.revoked_at else 'active'}")


@person_group.command("revoke")
@click.argument("name")
@click.pass_context
def person_revoke(ctx: click.Context, name: str) -> None:
    """Revoke person NAME's token on the server and in every competition."""
    from grader.hosting.services.people import revoke_everywhere

    people = _people(ctx)
    done = revoke_everywhere(people, name, _every_competition(ctx))
    click.echo(f"revoked person {name!r} on the server and in: {', '.join(done) or 'no competition'}")


@person_group.command("reissue")
@click.argument("name")
@click.pass_context
def person_reissue(ctx: click.Context, name: str) -> None:
    """Give person NAME, who lost their token, a new one (printed once): the old one stops working in every
    competition and on the server, and their web sessions end."""
    from grader.hosting.services.people import reissue

    people = _people(ctx)
    token = reissue(people, name, _every_competition(ctx))
    click.echo(token)
    click.echo(f"person {name!r}: new token printed on stdout (shown once); the old one no longer works, their web sessions ended", err=True)


def _every_competition(ctx: click.Context) -> list[tuple[str, Database]]:
    """Every competition of the server's directory (retired ones too), by name, with its database."""
    from grader.hosting.db.session import open_database
    from grader.hosting.directory.databases import competition_database
    from grader.hosting.directory.layout import ServerLayout

    layout = ServerLayout(ctx.obj["server_state"]).load()
    return [
        (e.name, open_database(layout.folder(e.name), competition_database(e, ctx.obj["server_database"])))
        for e in sorted(layout.entries.values(), key=lambda e: e.name)
    ]


@admin.command("registrations")
@click.option("--approve", "approve", metavar="NAME", default=None, help="Approve NAME's pending sign-up: they become a participant.")
@click.option("--refuse", "refuse", metavar="NAME", default=None, help="Refuse NAME's pending sign-up.")
@click.option("--all", "show_all", is_flag=True, help="List decided sign-ups too, not only the pending ones.")
@click.pass_context
def registrations(ctx: click.Context, approve: str | None, refuse: str | None, show_all: bool) -> None:
    """Sign-ups of the competition (docs/hosting.md, "Sign-up"): list the pending ones, or approve or refuse one."""
    from grader.errors import UsageError
    from grader.hosting.services import signup

    if approve is not None and refuse is not None:
        raise UsageError("--approve and --refuse: one decision at a time")
    if approve is not None or refuse is not None:
        name = approve or refuse or ""
        row = signup.decide(_db(ctx), _log(ctx), _people(ctx), name, approve=approve is not None)
        click.echo(f"{shown(row.name)}: {row.state}")
        return
    for row in signup.registrations(_db(ctx), None if show_all else signup.PENDING):
        click.echo(f"{shown(row.name):<24} {row.state:<9} {iso(row.requested_at)}  {shown(row.email) or '-'}")
