"""``--tasks`` is one shared option: every command that takes it parses it the same way."""

from __future__ import annotations

import click

from grader.cli.main import cli
from grader.cli.options import parse_task_list, tasks_option


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        found[prefix + name] = command
        if isinstance(command, click.Group):
            found.update(_commands(command, prefix + name + " "))
    return found


def test_the_task_list_is_split_on_commas_with_blanks_dropped() -> None:
    assert parse_task_list(None) is None and parse_task_list("") is None
    assert parse_task_list(" a, b,,c ,") == ["a", "b", "c"]


def test_every_command_with_tasks_uses_the_shared_option() -> None:
    using = {
        name: (command, parameter)
        for name, command in _commands(cli).items()
        for parameter in command.params
        if "--tasks" in getattr(parameter, "opts", [])
    }
    assert set(using) == {"run", "check", "effect", "export-mteb", "data import-coir", "data import-cat", "lint"}, sorted(using)
    reference = click.command()(tasks_option()(lambda tasks: None)).params[0]
    for name, (command, parameter) in using.items():
        assert parameter.name == "tasks" and parameter.metavar == "A,B", name
        assert parameter.callback is reference.callback, name
        assert parameter.process_value(click.Context(command), " x ,y") == ["x", "y"], name
