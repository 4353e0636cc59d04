"""``grader run``: grade a submission on a benchmark and write its report."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from grader.cli.options import dedup_aware_option, tasks_option
from grader.cli.progress import StderrProgress
from grader.data.registry import resolve_benchmark
from grader.grading.interfaces import RunOptions
from grader.grading.runner import grade_submission
from grader.grading.signals import stop_on_signals
from grader.hosting.worker.fingerprint import fingerprint_sha256
from grader.metrics.measures import parse_measures
from grader.metrics.policy import Policy
from grader.reports.table import format_report_table
from grader.retrieval.pca import parse_dimensions
from grader.sandbox.blinding_key import load_blinding_key
from grader.sandbox.limits import limits_from_options

if TYPE_CHECKING:
    from grader.data.benchmark import Benchmark
    from grader.integrity.dedup_measures import DedupAwareRuns
    from grader.integrity.sketch_file import TrainingSketch


@click.command("run")
@click.argument("submission", type=click.Path(path_type=Path))
@click.option("--benchmark", "benchmark_name", required=True, help="A registered benchmark (mini, coir, cat) or a benchmark folder.")
@tasks_option()
@click.option("--split", default=None, help="Split to grade (default: the benchmark's, usually test).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("out/run"),
    show_default=True,
    help="Folder for the report and the stored per-task results (resumable).",
)
@click.option(
    "--key", "key_path", type=click.Path(path_type=Path), default=None, help="Ed25519 private key: also write OUT/report.dsse.json, signed."
)
@click.option(
    "--blinding-key",
    "blinding_key_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Key (hex, mode 0600) that blinds the ids a container sees. Default: blinding.key beside --key, else OUT/blinding.key (created).",
)
@click.option("--policy", type=click.Choice([p.value for p in Policy]), default=Policy.STRICT.value, show_default=True)
@click.option(
    "--sandbox",
    type=click.Choice(["auto", "docker", "none"]),
    default="auto",
    show_default=True,
    help="auto: Docker when an engine answers (and, for ONNX, the runner image exists), else in-process.",
)
@click.option("--time-limit", type=float, default=None, metavar="SECONDS", help="Wall-clock limit per task in the sandbox (default 3600).")
@click.option("--memory", default=None, metavar="SIZE", help="Memory limit per task, swap included (e.g. 4g; default 8g).")
@click.option("--cpus", type=float, default=None, metavar="N", help="CPU limit per task (default 2).")
@click.option("--runtime", default=None, help="OCI runtime for the sandbox, e.g. runsc (gVisor); default: the engine's.")
@click.option(
    "--threads", type=click.IntRange(1, 256), default=None, help="Threads for encoding (default: all cores). Fixed threads => identical embeddings."
)
@click.option("--top-k", type=click.IntRange(1, 100_000), default=1000, show_default=True, help="Documents retrieved per query.")
@click.option("--measure", "measures", multiple=True, metavar="M", help="Measures to report (default: the benchmark's).")
@click.option(
    "--pca-dims",
    default=None,
    metavar="D1,D2",
    help="Also grade embeddings reduced by PCA to each dimension (CAT: 20,768); each is a separate result.",
)
@click.option("--keep-embeddings", is_flag=True, help="Keep each task's embeddings under OUT/embeddings (for `grader effect`).")
@click.option(
    "--images-from-submission-only",
    is_flag=True,
    help="Accept only an image in the submission's own docker save .tar, never one already on the host (the default a hosting service should use).",
)
@click.option(
    "--cross-check",
    is_flag=True,
    help="Also score each task's run with pytrec_eval and the coir policy, on the measures pytrec_eval has; exit 1 if any value differs by more than 1e-12.",
)
@dedup_aware_option(
    "Also print, beside the official numbers, the dedup-aware ones of each task (the clusters of this `grader lint` report "
    "of the same data; docs/lint.md). The report is unchanged; stored results are not reused."
)
@click.option(
    "--training-sketch",
    "training_sketch",
    type=click.Path(path_type=Path),
    default=None,
    help="A sketch of the training data (`grader sketch-training`): print its overlap with the graded split, as the release rule "
    "allows, beside the report (not in it: the report's contamination block holds a host's audit of a submitted sketch).",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def run_command(
    submission: Path,
    benchmark_name: str,
    tasks: list[str] | None,
    split: str | None,
    out_dir: Path,
    key_path: Path | None,
    blinding_key_path: Path | None,
    policy: str,
    sandbox: str,
    time_limit: float | None,
    memory: str | None,
    cpus: float | None,
    runtime: str | None,
    threads: int | None,
    top_k: int,
    measures: tuple[str, ...],
    pca_dims: str | None,
    keep_embeddings: bool,
    images_from_submission_only: bool,
    cross_check: bool,
    dedup_report_path: Path | None,
    training_sketch: Path | None,
    quiet: bool,
) -> None:
    """Grade SUBMISSION (folder, .tar.gz or .zip with submission.json) on a benchmark."""
    from grader.sandbox.sweep import sweep

    with stop_on_signals():
        # What dead graders left on this machine (containers, mounts, staged data): never a live grader's.
        swept = sweep(containers=sandbox != "none")
        if swept and not quiet:
            click.echo(f"swept what dead graders left: {swept.containers} container(s), {swept.folders} scratch folder(s)", err=True)
        benchmark = resolve_benchmark(benchmark_name)
        sketch = None
        if training_sketch is not None:  # read (and refused, if bad) before any grading starts
            from grader.integrity.sketch_file import read_sketch

            sketch = read_sketch(training_sketch)
        options = RunOptions(
            benchmark=benchmark,
            tasks=benchmark.select(tasks),
            split=split or benchmark.spec.default_split,
            out_dir=out_dir,
            policy=Policy(policy),
            key_path=key_path,
            threads=threads or (os.cpu_count() or 1),
            top_k=top_k,
            measures=parse_measures(list(measures)) if measures else (),
            sandbox=sandbox,
            limits=limits_from_options(time_limit=time_limit, memory=memory, cpus=cpus, runtime=runtime),
            pca_dims=parse_dimensions(pca_dims),
            keep_embeddings=keep_embeddings,
            explicit_limits=tuple(flag for flag, value in (("--cpus", cpus), ("--runtime", runtime)) if value is not None),
            images_from_submission_only=images_from_submission_only,
            cross_check=cross_check,
            blinding_key=None if blinding_key_path is None else load_blinding_key(blinding_key_path),
            fingerprint=fingerprint_sha256(),
        )
        dedup = None
        if dedup_report_path is not None:
            from grader.integrity.dedup_measures import DedupAwareRuns

            chosen = {name: benchmark.task(name) for name in options.tasks}
            dedup = DedupAwareRuns(dedup_report_path, chosen, options.effective_measures(), options.policy)
            options = replace(options, run_observer=dedup)
        report, path = grade_submission(submission, options, StderrProgress(quiet=quiet, primary=str(options.effective_measures()[0])))
        click.echo(format_report_table(report), nl=False)
        click.echo(f"report: {path}")
        if dedup is not None:
            click.echo(format_dedup_aware(dedup), nl=False)
        if sketch is not None:
            _print_released_overlap(benchmark, options, sketch)
        if cross_check:
            from grader.metrics.cross_check import STRICT_NOTE

            click.echo(f"note: {STRICT_NOTE}", err=True)


def format_dedup_aware(dedup: DedupAwareRuns) -> str:
    """The dedup-aware values of each ranked task, after the official table and labelled as not official."""
    from grader.metrics.output import as_table

    lines = []
    for task, evaluation in dedup.evaluations.items():
        clusters = len(dedup.clusters[task])
        lines.append(f"\ndedup-aware, task {task} (docs/lint.md; {clusters} duplicate clusters; not the official numbers):")
        lines.append(as_table(evaluation).split("\npolicy ", 1)[0])
    return "\n".join(lines) + "\n"


def _print_released_overlap(benchmark: Benchmark, options: RunOptions, sketch: TrainingSketch) -> None:
    """The audit's released figures (docs/contamination.md), printed after the report and never written into it."""
    from grader.integrity.audit import audit_tasks
    from grader.integrity.release import release

    overlaps = audit_tasks([benchmark.task(name) for name in options.tasks], options.split, sketch)
    click.echo("contamination audit of the declared training data (released figures; not part of the report):")
    for overlap in overlaps:
        click.echo(f"  {release(overlap).line()}")


def register(group: click.Group) -> None:
    """Add ``run`` to ``group``."""
    group.add_command(run_command)
