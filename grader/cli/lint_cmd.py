"""``grader lint``: duplicates, leaks and broken data in a benchmark's tasks (docs/lint.md)."""

from __future__ import annotations

from pathlib import Path

import click

from grader import jsonio
from grader.cli.options import tasks_option
from grader.errors import ReportError, UsageError
from grader.files import atomic_write_bytes, atomic_write_text


@click.command("lint")
@click.argument("benchmark")
@tasks_option()
@click.option("--split", default=None, help="The split whose queries the shares count (default: the benchmark's, usually test).")
@click.option(
    "--threshold",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=0.8,
    show_default=True,
    help="Least Jaccard similarity of two shingle sets that makes a near duplicate.",
)
@click.option("--max-chars", type=click.IntRange(min=1), default=32_768, show_default=True, help="A longer text is oversized (characters).")
@click.option("--examples", type=click.IntRange(min=0), default=10, show_default=True, help="Examples listed per finding and task.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (schema grader/schemas/lint.schema.json) instead of a table.")
@click.option("--out", "out_path", type=click.Path(path_type=Path), default=None, help="Also write the JSON report to this file.")
@click.option(
    "--key",
    "key_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Ed25519 private key (from `grader keygen`): also write the signed report (DSSE) beside --out, as NAME.dsse.json.",
)
def lint_command(
    benchmark: str,
    tasks: list[str] | None,
    split: str | None,
    threshold: float,
    max_chars: int,
    examples: int,
    as_json: bool,
    out_path: Path | None,
    key_path: Path | None,
) -> None:
    """Find duplicate, leaked, empty, oversized and dangling data in BENCHMARK (a registered name or a folder)."""
    from grader.cli.progress import StderrProgress
    from grader.data.registry import resolve_benchmark
    from grader.integrity.lint import LintSettings
    from grader.integrity.report import format_table, lint_benchmark

    if key_path is not None and out_path is None:
        raise UsageError("--key needs --out REPORT.json")
    resolved = resolve_benchmark(benchmark)
    settings = LintSettings(threshold=threshold, max_chars=max_chars, split=split or resolved.spec.default_split, examples=examples)
    progress = StderrProgress()
    report = lint_benchmark(resolved, tasks, settings, progress=lambda name: progress.note(f"lint {name}"))
    text = jsonio.dumps(report, indent=2, ensure_ascii=True) + "\n"
    if out_path is not None:
        atomic_write_text(out_path, text)
        if key_path is not None:
            from grader.integrity.signing import sign_lint_report
            from grader.reports.keys import load_private_key

            envelope_path = out_path.with_name(out_path.name.removesuffix(".json") + ".dsse.json")
            try:
                atomic_write_bytes(envelope_path, sign_lint_report(report, load_private_key(key_path)))
            except OSError as error:
                raise ReportError(f"{envelope_path}: cannot write: {error.strerror or error}") from None
    click.echo(text if as_json else format_table(report), nl=False)


def register(group: click.Group) -> None:
    """Add ``lint`` to ``group``."""
    group.add_command(lint_command)
