"""``grader serve``: host a competition on this machine."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("serve")
@click.option(
    "--competition",
    "competition_file",
    required=True,
    type=click.Path(path_type=Path),
    envvar="GRADER_COMPETITION",
    help="The competition file (TOML; see competitions_example/mini.toml).",
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
@click.option("--workers", default=1, show_default=True, type=click.IntRange(0, 64), help="Local worker processes (0: remote workers only).")
@click.option(
    "--database", default=None, envvar="GRADER_DATABASE", help="Database URL (default: SQLite in the state folder), e.g. postgresql://user@host/db."
)
@click.option(
    "--broker",
    default=None,
    envvar="GRADER_BROKER",
    help="Celery broker URL (redis://...): also dispatch to remote `grader worker --broker` machines.",
)
def serve(competition_file: Path, state_dir: Path, host: str, port: int, workers: int, database: str | None, broker: str | None) -> None:
    """Run the competition server: HTTP API, database, stored uploads and reports, and local workers."""
    from grader.hosting.config import load_competition
    from grader.hosting.server import ServeOptions
    from grader.hosting.server import serve as run

    run(
        ServeOptions(
            load_competition(competition_file),
            state_dir,
            host=host,
            port=port,
            workers=workers,
            database=database,
            broker=broker,
            competition_file=competition_file,
        )
    )


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(serve)
