"""``grader reproduce``: grade a signed report's submission again and compare; exit 1 naming what differs first."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

import grader
from grader.cli.progress import StderrProgress
from grader.data.registry import resolve_benchmark
from grader.errors import InputError, NotReproduced, UsageError
from grader.grading.runner import grade_submission
from grader.grading.signals import stop_on_signals
from grader.reports.keys import load_public_key
from grader.reports.verify import verify_report_file
from grader.reproduce.compare import Difference, data_difference, grade_difference, version_difference
from grader.reproduce.regrade import refusal, regrade_options
from grader.sandbox.blinding_key import load_blinding_key


def _fingerprint(report: dict[str, Any]) -> dict[str, Any] | None:
    """This machine's CPU fingerprint, when the report names its grading machine's (a hosted worker's grade)."""
    if report["labels"].get("fingerprint") is None:
        return None
    from grader.hosting.worker.fingerprint import worker_fingerprint

    return worker_fingerprint()


def _regrade(report_path: str, report: dict[str, Any], submission: Path, benchmark_name: str, out: Path, blinding: Path | None, quiet: bool) -> dict:
    benchmark = resolve_benchmark(benchmark_name)
    for found in (data_difference(report, benchmark), version_difference(report, grader.__version__)):
        if found is not None:
            raise NotReproduced(f"{report_path}: not reproduced: {found}")
    options = regrade_options(
        Path(report_path), report, benchmark, out_dir=out, blinding_key=None if blinding is None else load_blinding_key(blinding)
    )
    progress = StderrProgress(quiet=quiet, primary=str(options.effective_measures()[0]))
    regraded, _ = grade_submission(submission, options, progress)
    return regraded


@click.command("reproduce")
@click.argument("report")
@click.argument("submission", type=click.Path(path_type=Path))
@click.option("--key", "key_path", required=True, help="Public key (grader.pub) the report must be signed with.")
@click.option("--benchmark", "benchmark_name", default=None, help="The data: a registered benchmark or a folder (default: the report's benchmark).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the re-graded report.json in this folder (new or empty). Default: a temporary folder, removed.",
)
@click.option(
    "--blinding-key",
    "blinding_key_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Key that blinds the ids a container sees (default: a new one).",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def reproduce_command(
    report: str, submission: Path, key_path: str, benchmark_name: str | None, out_dir: Path | None, blinding_key_path: Path | None, quiet: bool
) -> None:
    """Verify the signed REPORT, grade SUBMISSION again on the data as the report says, and compare.

    Exit 0 when the run digest, status and measures of every task are the report's; exit 1 naming what
    differs first: data digest, grader version, sandbox image, CPU fingerprint, task, query, submission.
    """
    verified = verify_report_file(report, load_public_key(key_path))
    original = verified.report
    refused = refusal(original)
    if refused is not None:
        raise InputError(f"cannot reproduce: {refused}", path=report)
    if out_dir is not None and out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UsageError(f"--out {out_dir}: not a new or empty folder (a re-grade never reuses stored results)")
    with stop_on_signals():
        if out_dir is not None:
            regraded = _regrade(report, original, submission, benchmark_name or original["benchmark"]["name"], out_dir, blinding_key_path, quiet)
        else:
            with tempfile.TemporaryDirectory(prefix="grader-reproduce-") as scratch:
                regraded = _regrade(
                    report, original, submission, benchmark_name or original["benchmark"]["name"], Path(scratch), blinding_key_path, quiet
                )
    found = grade_difference(original, regraded, _fingerprint(original))
    if found is None and regraded["subject"]["digest"] != original["subject"]["digest"]:
        found = Difference(
            "submission",
            f"sha256:{original['subject']['digest']['sha256']} in the report, sha256:{regraded['subject']['digest']['sha256']} given "
            "(every task's results are the report's)",
        )
    if found is not None:
        raise NotReproduced(f"{report}: not reproduced: {found}")
    measure = original["aggregate"]["measure"]
    click.echo(f"reproduced: {report}: {len(original['tasks'])} task(s), every run digest, status and measure equal")
    score = original["aggregate"]["score"]
    click.echo(f"score: {measure} = {'n/a (a task failed)' if score is None else repr(score)}")


def register(group: click.Group) -> None:
    """Add ``reproduce`` to ``group``."""
    group.add_command(reproduce_command)
