"""``grader data``: inspect and import benchmark data."""

from __future__ import annotations

import click

from grader.data.digests import describe
from grader.metrics.output import dumps


@click.group("data")
def data_group() -> None:
    """Inspect and import benchmark data."""


@data_group.command("info")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def info_command(target: str, as_json: bool) -> None:
    """Digests of a task folder, a benchmark folder or a registered benchmark.

    Prints a sha256 per file and one per split (over the corpus, the queries and
    that split's qrels), the digests later reports name.
    """
    description = describe(target)
    if as_json:
        click.echo(dumps(description), nl=False)
        return
    click.echo(f"benchmark {description['benchmark']} (version {description['version']}) at {description['root']}")
    for task_name, task in description["tasks"].items():
        click.echo(f"task {task_name}")
        for file_name, digest in task["files"].items():
            click.echo(f"  file  {digest}  {file_name}")
        for split, info in task["splits"].items():
            click.echo(f"  split {info['sha256']}  {split} ({info['queries']} judged queries, {info['judgements']} judgements)")


def register(group: click.Group) -> None:
    """Add ``data`` to ``group``."""
    group.add_command(data_group)

