"""``grader benchmarks``: list the registered benchmarks."""

from __future__ import annotations

import click

from grader.data.registry import REGISTERED, data_root, registered_spec


@click.command("benchmarks")
def benchmarks_command() -> None:
    """List registered benchmarks, their tasks, primary measure and data location."""
    for name in REGISTERED:
        spec = registered_spec(name)
        root = data_root(name)
        state = "present" if root.is_dir() else "not imported"
        click.echo(
            f"{name} (version {spec.version}): {len(spec.tasks)} datasets in {len(spec.units())} scored tasks, primary {spec.primary_measure}; data: {root} [{state}]"
        )
        for unit, members in spec.units():
            if len(members) == 1 and members[0] == unit:
                click.echo(f"  {unit}")
            else:
                click.echo(f"  {unit}: {', '.join(members)} (averaged into one score)")


def register(group: click.Group) -> None:
    """Add ``benchmarks`` to ``group``."""
    group.add_command(benchmarks_command)
