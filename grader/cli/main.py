"""The ``grader`` command group: the one place where errors become exit codes (table: :mod:`grader.cli.exits`)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from grader import __version__
from grader.cli.exits import EXIT_MEANINGS, exit_status, interrupted_status
from grader.errors import GraderError, Interrupted
from grader.text import MAX_ERROR_LINE, bounded


class GraderGroup(click.Group):
    """A click group that prints a :class:`GraderError` as one line and exits with its status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GraderError as error:
            # GraderError messages are escaped and bounded when made (grader.text); bounded again, as the last step.
            click.echo(f"error: {bounded(str(error), MAX_ERROR_LINE)}", err=True)
            if error.hint:
                click.echo(f"hint: {bounded(error.hint, MAX_ERROR_LINE)}", err=True)
            sys.exit(exit_status(error))
        except Interrupted as stop:  # a BaseException: raised by grader.grading.signals after cleaning up
            click.echo(f"error: {stop}", err=True)
            sys.exit(interrupted_status(stop))


@click.group(cls=GraderGroup)
@click.version_option(__version__, prog_name="grader")
def cli() -> None:
    """Grade code-retrieval submissions on hidden test data, reproducibly and verifiably."""


def _exit_table() -> str:
    # \b keeps click from rewrapping the table into one paragraph.
    rows = "\n".join(f"  {'128+N' if status == 128 else str(status):<6}{meaning}" for status, meaning in EXIT_MEANINGS)
    return f'{cli.help}\n\n\b\nExit status (README.md, "Exit status"):\n{rows}'


cli.help = _exit_table()


#: The command modules; each has ``register(cli)``. Imported in ``_register`` so that each stays independent of the others.
COMMAND_MODULES = (
    "admin_cmd",
    "benchmarks_cmd",
    "check_cmd",
    "compare_cmd",
    "data_cmd",
    "effect_cmd",
    "export_cmd",
    "images_cmd",
    "keys_cmd",
    "log_cmd",
    "pack_cmd",
    "run_cmd",
    "score_cmd",
    "serve_cmd",
    "submit_cmd",
    "translation_cmd",
    "verify_cmd",
    "worker_cmd",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"grader.cli.{name}").register(cli)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="grader")
