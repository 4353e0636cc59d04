"""``grader serve``: host a competition on this machine."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import click

from grader.errors import UsageError
from grader.hosting import environment


def _addresses(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Each value an IP address or network (``*`` or a name would trust anyone who can reach the port)."""
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not an IP address or network") from None
    return values


@click.command("serve")
@click.option(
    "--competition",
    "competition_file",
    default=None,
    type=click.Path(path_type=Path),
    envvar="GRADER_COMPETITION",
    help="One competition file (TOML; see competitions_example/mini.toml): a one-competition server, its state folder as before.",
)
@click.option(
    "--competitions",
    "competitions_dir",
    default=None,
    type=click.Path(path_type=Path, file_okay=False),
    envvar="GRADER_COMPETITIONS",
    help="A folder of competition files: a server of many competitions, each under /c/<name>/ (docs/hosting.md).",
)
@click.option(
    "--state",
    "state_dir",
    required=True,
    type=click.Path(path_type=Path),
    envvar="GRADER_STATE",
    help="State folder: database, uploads, reports, host key.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(0, 64),
    help="Local worker processes (0: remote workers only); with --competitions, in all: each serves every competition.",
)
@click.option(
    "--database",
    default=None,
    envvar=environment.DATABASE,
    help="Database URL (default: SQLite in the state folder), e.g. postgresql://user@host/db.",
)
@click.option(
    "--broker",
    default=None,
    envvar=environment.BROKER,
    help="Celery broker URL (redis://...): also dispatch to remote `grader worker --broker` machines.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    envvar="GRADER_TRUSTED_PROXIES",
    callback=_addresses,
    metavar="ADDR",
    help="A reverse proxy (IP address or network) whose X-Forwarded-For names the client; repeatable. Default: none, forwarded headers are ignored.",
)
@click.option(
    "--min-body-rate",
    default=16384,
    show_default=True,
    envvar="GRADER_MIN_BODY_RATE",
    type=click.FloatRange(min=0),
    help="Bytes per second a request body must average once --body-grace has passed; slower ones are cut (408). 0: no minimum.",
)
@click.option(
    "--body-grace",
    "body_grace_s",
    default=20.0,
    show_default=True,
    envvar="GRADER_BODY_GRACE_S",
    type=click.FloatRange(min=0),
    help="Seconds a request body may take before --min-body-rate applies.",
)
def serve(
    competition_file: Path | None,
    competitions_dir: Path | None,
    state_dir: Path,
    host: str,
    port: int,
    workers: int,
    database: str | None,
    broker: str | None,
    trusted_proxies: tuple[str, ...],
    min_body_rate: float,
    body_grace_s: float,
) -> None:
    """Run the competition server: HTTP API, database, stored uploads and reports, and local workers."""
    from grader.hosting.config import load_competition
    from grader.hosting.directory.layout import is_server_layout
    from grader.hosting.errors import HostingError

    # What both kinds of server take alike: where to listen, the workers, database and broker, the body limits.
    listening: dict[str, Any] = {
        "host": host,
        "port": port,
        "workers": workers,
        "database": database,
        "broker": broker,
        "trusted_proxies": trusted_proxies,
        "min_body_rate": min_body_rate,
        "body_grace_s": body_grace_s,
    }
    if competitions_dir is not None or (competition_file is None and is_server_layout(state_dir)):
        if competition_file is not None:
            raise UsageError("give --competition FILE (one competition) or --competitions DIR (many), not both")
        from grader.hosting.serve_many import ManyOptions, serve_many

        serve_many(ManyOptions(state_dir, competitions_dir, **listening))
        return
    if competition_file is None:
        raise UsageError("which competition? give --competition FILE, or --competitions DIR for a server of many")
    if is_server_layout(state_dir):
        raise HostingError(
            f"{state_dir}: the state folder of a server of many competitions", hint="serve it with --competitions DIR (or with no competition option)"
        )
    from grader.hosting.server import ServeOptions
    from grader.hosting.server import serve as run

    run(ServeOptions(load_competition(competition_file), state_dir, competition_file=competition_file, **listening))


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(serve)
