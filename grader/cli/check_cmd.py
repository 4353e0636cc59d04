"""``grader check``: validate a submission locally before sending it, optionally against a competition's rules."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from grader import jsonio
from grader.check.checker import RulesCheck, run_check
from grader.cli.exits import EXIT_NOT_PASSED
from grader.cli.options import tasks_option
from grader.data.registry import resolve_benchmark
from grader.errors import GraderError
from grader.grading.interfaces import RunOptions
from grader.metrics.policy import Policy
from grader.sandbox.limits import limits_from_options

if TYPE_CHECKING:
    from grader.integrity.contamination import SplitOverlap


def _rules_check(rules: Any) -> RulesCheck:
    """The competition's rules as ``grader submit`` and the server apply them: kind, training labels, upload cap."""
    from grader.hosting.intake.refusals import invalid, refusal_line, too_large
    from grader.hosting.intake.upload_checks import check_manifest_rules
    from grader.hosting.participant.client import packed

    def check(submission: Path, manifest: Any) -> str:
        try:
            check_manifest_rules(manifest, path=Path("submission.json"), kinds=rules.kinds, require_training_labels=rules.require_training_labels)
        except GraderError as error:
            refusal = invalid(error)
            raise GraderError(f"the server would refuse it: {refusal_line(refusal.status, str(refusal), None)}", hint=error.hint) from None
        with packed(submission) as archive:
            size = archive.stat().st_size
        if size > rules.upload_max_bytes:
            refusal = too_large(size, rules.upload_max_bytes)
            raise GraderError(f"the server would refuse it: {refusal_line(refusal.status, str(refusal), None)}", hint="make the model smaller")
        labels = "training labels declared" if rules.require_training_labels else "training labels not required"
        return f"{manifest.kind} accepted, {labels}, packed {size / 1e6:.1f} MB of the {rules.upload_max_bytes / 1e6:.1f} MB upload cap"

    return check


@click.command("check")
@click.argument("submission", type=click.Path(path_type=Path))
@click.option(
    "--competition",
    "competition_target",
    default=None,
    metavar="URL|FILE",
    help="Check against a competition: a server's URL (its /api/v1/competition) or a competition TOML file. "
    "Takes its limits, kinds, training-label rule, upload cap, benchmark and tasks.",
)
@click.option(
    "--benchmark", "benchmark_name", default=None, help="A registered benchmark or a benchmark folder (default: the competition's, else mini)."
)
@tasks_option("Comma-separated task names (default: the competition's, else all).")
@click.option("--sandbox", type=click.Choice(["auto", "docker", "none"]), default="auto", show_default=True)
@click.option("--time-limit", type=float, default=None, metavar="SECONDS", help="Per-task time limit (default: the competition's, else 3600).")
@click.option("--memory", default=None, metavar="SIZE", help="Per-task memory limit (default: the competition's, else 8g).")
@click.option("--cpus", type=float, default=None, metavar="N", help="Per-task CPU limit (default: the competition's, else 2).")
@click.option("--threads", type=click.IntRange(1, 256), default=None, help="Threads for in-process encoding.")
@click.option(
    "--images-from-submission-only",
    is_flag=True,
    help="Accept only an image in the submission's own docker save .tar, never one already on the host (the default a hosting service should use).",
)
@click.option(
    "--training-sketch",
    "training_sketch",
    type=click.Path(path_type=Path),
    default=None,
    help="A sketch of the training data (`grader sketch-training`): also show its overlap with the public sample split, in full.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result with the same steps.")
def check_command(
    submission: Path,
    competition_target: str | None,
    benchmark_name: str | None,
    tasks: list[str] | None,
    sandbox: str,
    time_limit: float | None,
    memory: str | None,
    cpus: float | None,
    threads: int | None,
    images_from_submission_only: bool,
    training_sketch: Path | None,
    as_json: bool,
) -> None:
    """Run SUBMISSION through intake, a sample run, validation, scoring and an estimate, on public data only.

    Without --competition the limits are grader check's own defaults (3600 s, 8g, 2 CPUs), which may not be
    the competition's: step 3 says which limits it used and where from. Exit 0 only when every step passes.
    """
    sketch = None
    if training_sketch is not None:  # a bad sketch is refused before the check starts
        from grader.integrity.sketch_file import read_sketch

        sketch = read_sketch(training_sketch)
    rules = None
    if competition_target is not None:
        from grader.hosting.participant.competition_rules import load_rules

        rules = load_rules(competition_target)
    benchmark = resolve_benchmark(benchmark_name or (rules.benchmark if rules else "mini"))
    selected = benchmark.select(tasks if tasks else (list(rules.tasks) if rules and rules.tasks else None))
    overrides = [name for name, value in (("--time-limit", time_limit), ("--memory", memory), ("--cpus", cpus)) if value is not None]
    if rules is not None:
        source = f"limits of {rules.source}" + (f", with {', '.join(overrides)} from the command line" if overrides else "")
        limits = limits_from_options(time_limit=time_limit, memory=memory, cpus=cpus, runtime=None, base=rules.limits)
    else:
        source = "grader check's own defaults" + (f" with {', '.join(overrides)}" if overrides else "") + "; --competition takes a competition's"
        limits = limits_from_options(time_limit=time_limit, memory=memory, cpus=cpus, runtime=None)
    options = RunOptions(
        benchmark=benchmark,
        tasks=selected,
        split=benchmark.spec.sample_split,
        out_dir=Path("."),
        policy=Policy.STRICT,
        threads=threads or (os.cpu_count() or 1),
        sandbox=sandbox,
        limits=limits,
        images_from_submission_only=images_from_submission_only,
    )
    report = run_check(submission, options, rules=_rules_check(rules) if rules else None, limits_source=source)
    overlaps: list[SplitOverlap] = []
    if sketch is not None:
        from grader.integrity.audit import audit_tasks

        # A public split hides nothing, so its figures are shown in full (no release rule: docs/contamination.md).
        overlaps = audit_tasks([benchmark.task(name) for name in selected], options.split, sketch)
    if as_json:
        result = report.as_dict()
        if sketch is not None:
            result["contamination"] = [dataclasses.asdict(overlap) for overlap in overlaps]
        click.echo(jsonio.dumps(result, indent=2, ensure_ascii=True))
    else:
        click.echo(report.as_text(), nl=False)
        if sketch is not None:
            from grader.integrity.contamination import describe

            click.echo("contamination audit of the declared training data, public split (all figures):")
            for line in describe(overlaps):
                click.echo(f"  {line}")
    if not report.passed:
        click.get_current_context().exit(EXIT_NOT_PASSED)


def register(group: click.Group) -> None:
    """Add ``check`` to ``group``."""
    group.add_command(check_command)
