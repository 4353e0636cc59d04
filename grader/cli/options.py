"""Options several commands share, declared and parsed once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def parse_task_list(value: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None (or empty) means every task."""
    return [part.strip() for part in value.split(",") if part.strip()] if value else None


def _task_list(_context: click.Context, _parameter: click.Parameter, value: str | None) -> list[str] | None:
    return parse_task_list(value)


def tasks_option(help_text: str = "Comma-separated task names (default: all).") -> Callable[[F], F]:
    """``--tasks A,B``: the command receives ``tasks`` as a list of names, or None for its default."""
    return click.option("--tasks", "tasks", default=None, metavar="A,B", callback=_task_list, help=help_text)


def competition_file_option(what: str = "The competition file") -> Callable[[F], F]:
    """``--competition FILE`` (or ``GRADER_COMPETITION``) of an admin command; by default the file `grader serve` last ran with."""
    return click.option(
        "--competition",
        "competition_file",
        default=None,
        type=click.Path(path_type=Path),
        envvar="GRADER_COMPETITION",
        help=f"{what} (default: the one `grader serve` last ran with on this --state).",
    )


def dedup_aware_option(help_text: str) -> Callable[[F], F]:
    """``--dedup-aware LINT.json``: the command receives ``dedup_report_path`` (None: official numbers only)."""
    return click.option("--dedup-aware", "dedup_report_path", type=click.Path(path_type=Path), default=None, metavar="LINT.json", help=help_text)
