"""``grader export-mteb``: MTEB result files from a grading report of CoIR tasks."""

from __future__ import annotations

from pathlib import Path

import click

from grader.cli.options import tasks_option
from grader.export.mteb import MTEB_VERSION, export_mteb


@click.command("export-mteb")
@click.argument("report", type=click.Path(path_type=Path))
@click.option(
    "--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Folder to write results/<model>/<revision>/<Task>.json under."
)
@click.option(
    "--assume-mteb-revisions",
    is_flag=True,
    help="State that the graded data is MTEB's pinned dataset revision of each task (a report cannot show it).",
)
@click.option("--model-name", default=None, help="Model name in MTEB (default: the submission's name).")
@click.option("--revision", default=None, help="Model revision in MTEB (default: the submission's sha256 digest).")
@tasks_option("Comma-separated grader task names (default: every CoIR task the report graded).")
def export_mteb_command(
    report: Path, out_dir: Path, assume_mteb_revisions: bool, model_name: str | None, revision: str | None, tasks: list[str] | None
) -> None:
    """Write MTEB's per-task result files (mteb==%s) for the CoIR tasks REPORT graded; refuse what MTEB would compute otherwise."""
    written = export_mteb(
        report,
        out_dir,
        assume_revisions=assume_mteb_revisions,
        model_name=model_name,
        revision=revision,
        tasks=tasks,
        say=lambda line: click.echo(f"export-mteb: {line}", err=True),
    )
    for path in written:
        click.echo(str(path))


export_mteb_command.help = (export_mteb_command.help or "").replace("%s", MTEB_VERSION)


def register(group: click.Group) -> None:
    """Add ``export-mteb`` to ``group``."""
    group.add_command(export_mteb_command)
