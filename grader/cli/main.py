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


#: The command modules; each has ``register(cli)``, which adds its commands. Each stays independent of the others.
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
    "lint_cmd",
    "log_cmd",
    "notify_cmd",
    "pack_cmd",
    "reproduce_cmd",
    "reveal_cmd",
    "run_cmd",
    "score_cmd",
    "serve_cmd",
    "sketch_cmd",
    "submit_cmd",
    "team_cmd",
    "translation_cmd",
    "verify_cmd",
    "worker_cmd",
)

#: Which module defines a command, so that running one imports only its module. Some modules pull in
#: numpy, scipy, numba and onnx (about 2 s): `grader admin list` needs none of them. A command missing
#: here still works: looking it up then imports every module.
COMMAND_HOMES = {
    "admin": "admin_cmd",
    "benchmarks": "benchmarks_cmd",
    "check": "check_cmd",
    "compare": "compare_cmd",
    "data": "data_cmd",
    "effect": "effect_cmd",
    "export-mteb": "export_cmd",
    "images": "images_cmd",
    "keygen": "keys_cmd",
    "lint": "lint_cmd",
    "log": "log_cmd",
    "notify": "notify_cmd",
    "pack": "pack_cmd",
    "reproduce": "reproduce_cmd",
    "reveal-check": "reveal_cmd",
    "run": "run_cmd",
    "score": "score_cmd",
    "serve": "serve_cmd",
    "sketch-training": "sketch_cmd",
    "submit": "submit_cmd",
    "team": "team_cmd",
    "archive": "submit_cmd",
    "status": "submit_cmd",
    "submissions": "submit_cmd",
    "quota": "submit_cmd",
    "finals": "submit_cmd",
    "score-translation": "translation_cmd",
    "verify": "verify_cmd",
    "worker": "worker_cmd",
}


class _Commands(dict[str, click.Command]):
    """``cli.commands``, filled on demand: a lookup by name imports that command's module; listing imports them all."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: set[str] = set()

    def _load(self, module: str) -> None:
        if module not in self.loaded:
            self.loaded.add(module)
            importlib.import_module(f"grader.cli.{module}").register(cli)

    def load_all(self) -> None:
        """Import every command module."""
        for module in COMMAND_MODULES:
            self._load(module)

    def _find(self, name: object) -> None:
        if isinstance(name, str) and not super().__contains__(name):
            home = COMMAND_HOMES.get(name)
            if home is not None:
                self._load(home)
            if not super().__contains__(name):
                self.load_all()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self._find(name)
        return super().get(name, default)

    def __getitem__(self, name: str) -> click.Command:
        self._find(name)
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        self._find(name)
        return super().__contains__(name)

    def __iter__(self) -> Any:
        self.load_all()
        return super().__iter__()

    def __len__(self) -> int:
        self.load_all()
        return super().__len__()

    def keys(self) -> Any:
        self.load_all()
        return super().keys()

    def values(self) -> Any:
        self.load_all()
        return super().values()

    def items(self) -> Any:
        self.load_all()
        return super().items()


cli.commands = _Commands()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="grader")
