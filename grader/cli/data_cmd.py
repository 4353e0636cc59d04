"""``grader data``: inspect and import benchmark data."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from grader.cli.options import tasks_option
from grader.data.describe import describe
from grader.metrics.output import dumps

if TYPE_CHECKING:
    from grader.data.selection import ImportResult


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


@data_group.command("import-coir")
@click.argument("src", type=click.Path(file_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@tasks_option("Comma-separated tasks to import (default: every CoIR task found in SRC).")
@click.option("--overwrite", is_flag=True, help="Replace task folders that exist in DEST already.")
def import_coir_command(src: Path, dest: Path, tasks: list[str] | None, overwrite: bool) -> None:
    """Convert CoIR's Hugging Face parquet snapshot SRC into BEIR task folders in DEST.

    SRC holds the downloaded datasets <task>-queries-corpus and <task>-qrels
    (also named CoIR-Retrieval__<task>-...). Each task becomes DEST/<task> with
    corpus.jsonl, queries.jsonl (judged queries only) and qrels/<split>.tsv
    (valid renamed to dev); DEST/benchmark.json lists the tasks present, so
    `--benchmark DEST` works. Nothing is written if any task fails.
    """
    from grader.data.import_coir import import_coir

    result = import_coir(src, dest, tasks=tasks, overwrite=overwrite, progress=lambda line: click.echo(line, err=True))
    _report(result, src)


@data_group.command("import-cat")
@click.argument("src", type=click.Path(file_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@tasks_option("Comma-separated datasets to import: tlc, csn, funcom, pcsd (default: every one found in SRC).")
@click.option("--overwrite", is_flag=True, help="Replace task folders that exist in DEST already.")
def import_cat_command(src: Path, dest: Path, tasks: list[str] | None, overwrite: bool) -> None:
    """Convert CAT's cleaned JSONL splits in SRC into BEIR task folders in DEST.

    SRC holds one folder per dataset (tlc, csn, funcom, pcsd) with the split
    test/*.jsonl or test.jsonl (objects with id, code, comment). Each dataset
    becomes DEST/<dataset> whose corpus is the code of the whole test split
    (ids c-<id>), whose queries are the test comments (ids q-<id>) and whose
    qrels/test.tsv pairs each query with its own record, as CAT evaluates.
    DEST/benchmark.json lists the tasks present, so `--benchmark DEST` works.
    Nothing is written if any dataset fails.
    """
    from grader.data.import_cat import import_cat

    result = import_cat(src, dest, tasks=tasks, overwrite=overwrite, progress=lambda line: click.echo(line, err=True))
    _report(result, src)


def _report(result: ImportResult[Any], src: Path) -> None:
    """The closing lines of an import, on stderr (the progress lines went there too)."""
    if result.missing:
        click.echo(f"not found in {src} (not imported): {', '.join(result.missing)}", err=True)
    click.echo(
        f"imported {len(result.imported)} task(s) into {result.dest}; {result.benchmark_path} lists {len(result.benchmark_tasks)} task(s)", err=True
    )


def register(group: click.Group) -> None:
    """Add ``data`` to ``group``."""
    group.add_command(data_group)
