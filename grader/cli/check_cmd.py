"""``grader check``: validate a submission locally before sending it."""

from __future__ import annotations

import os
from pathlib import Path

import click

from grader import jsonio
from grader.check.checker import run_check
from grader.cli.exits import EXIT_NOT_PASSED
from grader.cli.options import tasks_option
from grader.data.registry import resolve_benchmark
from grader.grading.interfaces import RunOptions
from grader.metrics.policy import Policy
from grader.sandbox.limits import limits_from_options


@click.command("check")
@click.argument("submission", type=click.Path(path_type=Path))
@click.option("--benchmark", "benchmark_name", default="mini", show_default=True, help="A registered benchmark or a benchmark folder.")
@tasks_option()
@click.option("--sandbox", type=click.Choice(["auto", "docker", "none"]), default="auto", show_default=True)
@click.option("--time-limit", type=float, default=None, metavar="SECONDS", help="Per-task time limit assumed for grading (default 3600).")
@click.option("--memory", default=None, metavar="SIZE", help="Per-task memory limit (default 8g).")
@click.option("--cpus", type=float, default=None, metavar="N", help="Per-task CPU limit (default 2).")
@click.option("--threads", type=click.IntRange(1, 256), default=None, help="Threads for in-process encoding.")
@click.option(
    "--images-from-submission-only",
    is_flag=True,
    help="Accept only an image in the submission's own docker save .tar, never one already on the host (the default a hosting service should use).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result with the same steps.")
def check_command(
    submission: Path,
    benchmark_name: str,
    tasks: list[str] | None,
    sandbox: str,
    time_limit: float | None,
    memory: str | None,
    cpus: float | None,
    threads: int | None,
    images_from_submission_only: bool,
    as_json: bool,
) -> None:
    """Run SUBMISSION through intake, a sample run, validation, scoring and an estimate, on public data only.

    Exit 0 only when every step passes.
    """
    benchmark = resolve_benchmark(benchmark_name)
    selected = benchmark.select(tasks)
    options = RunOptions(
        benchmark=benchmark,
        tasks=selected,
        split=benchmark.spec.sample_split,
        out_dir=Path("."),
        policy=Policy.STRICT,
        threads=threads or (os.cpu_count() or 1),
        sandbox=sandbox,
        limits=limits_from_options(time_limit=time_limit, memory=memory, cpus=cpus, runtime=None),
        images_from_submission_only=images_from_submission_only,
    )
    report = run_check(submission, options)
    if as_json:
        click.echo(jsonio.dumps(report.as_dict(), indent=2, ensure_ascii=True))
    else:
        click.echo(report.as_text(), nl=False)
    if not report.passed:
        click.get_current_context().exit(EXIT_NOT_PASSED)


def register(group: click.Group) -> None:
    """Add ``check`` to ``group``."""
    group.add_command(check_command)
