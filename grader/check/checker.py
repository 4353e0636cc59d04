"""``grader check``: run a submission through intake, a sample run, validation and
scoring on public data only, and say what will go wrong when it is graded.

The steps use the grading code itself (the same intake, sandbox, limits and
validators), on the benchmark's public sample split, never the hidden one. Like
grading, check reaches what a container wrote through :mod:`grader.collect`, never
through the sandbox (an import-layer contract forbids it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.check.steps import STEP_NAMES, CheckReport, StepResult, listed
from grader.collect.validate import output_problems
from grader.errors import GraderError, TaskFailure
from grader.failures import FailureCode
from grader.grading.backends import prepare_task_grader
from grader.grading.blinding_keys import with_blinding_key
from grader.grading.interfaces import RunOptions, SilentProgress, TaskGrader, TaskInputs, load_task_inputs
from grader.metrics.policy import evaluate
from grader.runs.run import Run
from grader.submissions.archive import open_submission
from grader.submissions.digest import submission_digest
from grader.submissions.manifest import Manifest, load_manifest

ARCHIVE, INTAKE, SAMPLE_RUN, VALIDATION, SCORE, ESTIMATE = STEP_NAMES


@dataclass
class _SampleOutcome:
    """What the sample ranking of one task produced (through the same task grader as grading)."""

    name: str
    inputs: TaskInputs
    elapsed_s: float
    run: Run | None = None
    output_failure: TaskFailure | None = None
    #: a copy of what a container wrote (sandboxed graders), for the all-errors validation
    kept_output: Path | None = None
    #: the container's mode (``retrieve`` or ``encode``), for sandboxed graders
    mode: str | None = None
    #: the query and document ids the container saw (pseudonyms, docs/protocol.md), for sandboxed graders
    staged_ids: tuple[Sequence[str], Sequence[str]] | None = None
    dimension: int | None = None


def _hint(error: GraderError, default: str) -> str:
    return error.hint or default


#: A competition's own rules on a submission (``grader check --competition``): given the submission and its
#: manifest, raise :class:`GraderError` with the words of the server's refusal, or return what was checked.
RulesCheck = Callable[[Path, Any], str]


def describe_limits(options: RunOptions) -> str:
    """The per-task limits of ``options`` in one phrase: ``600 s, 4.0 GiB, 1 CPU(s)``."""
    limits = options.limits
    return f"{limits.time_limit_s:g} s, {limits.memory_bytes / 2**30:.1f} GiB, {limits.cpus:g} CPU(s)"


def run_check(
    submission: Path, options: RunOptions, *, rules: RulesCheck | None = None, limits_source: str = "grader check's own defaults"
) -> CheckReport:
    """Run every step; stop at the first blocking one (later steps are reported as not run).

    ``rules`` adds a competition's rules to step 1; ``limits_source`` says where ``options.limits`` came from
    (step 3 names the limits it ran under and their source).
    """
    report = CheckReport(str(submission))
    # A fresh blinding key unless one is given: check keeps nothing, and writes no key where it runs.
    options = with_blinding_key(options)
    with contextlib.ExitStack() as stack:
        opened = _archive_step(report, stack, submission, rules)
        if opened is None:
            return report.finish()
        folder, manifest = opened
        grader = _intake_step(report, folder, manifest, options)
        if grader is None:
            return report.finish()
        runs = _sample_run_step(report, stack, grader, options, limits_source)
        if runs is None or not _validation_step(report, runs, manifest, options):
            return report.finish()
        report.add(_score_step(runs, options))
        report.add(_estimate(runs, options))
    return report.finish()


def _archive_step(report: CheckReport, stack: contextlib.ExitStack, submission: Path, rules: RulesCheck | None) -> tuple[Path, Manifest] | None:
    """1. The archive opens, its manifest is valid and (with ``rules``) the competition accepts it: the unpacked folder
    (open until ``stack`` closes) and the manifest."""
    try:
        folder = stack.enter_context(open_submission(submission))
        manifest = load_manifest(folder)
        digest = submission_digest(folder)
    except GraderError as error:
        report.add(StepResult(ARCHIVE, "failed", str(error), _hint(error, "see docs/protocol.md and schemas/submission.schema.json")))
        return None
    ruled = ""
    if rules is not None:
        try:
            ruled = f"; {rules(submission, manifest)}"
        except GraderError as error:
            report.add(StepResult(ARCHIVE, "failed", str(error), _hint(error, "the competition's rules: see its /api/v1/competition")))
            return None
    report.add(
        StepResult(
            ARCHIVE,
            "passed",
            f"{manifest.kind} submission {manifest.name!r}, sha256 {digest[:16]}...{ruled}",
            data={"digest": digest, "kind": manifest.kind},
        )
    )
    return folder, manifest


def _intake_step(report: CheckReport, folder: Path, manifest: Manifest, options: RunOptions) -> TaskGrader | None:
    """2. Intake: the task grader grading uses (the same choice, the same intake)."""
    try:
        prepared = prepare_task_grader(folder, manifest, options)
    except GraderError as error:
        report.add(StepResult(INTAKE, "failed", str(error), _hint(error, "fix the model, tokenizer or image named in submission.json")))
        return None
    report.add(StepResult(INTAKE, "passed", prepared.intake, data={"sandbox": prepared.sandbox}))
    return prepared.grader


def _sample_run_step(
    report: CheckReport, stack: contextlib.ExitStack, grader: TaskGrader, options: RunOptions, limits_source: str
) -> list[_SampleOutcome] | None:
    """3. A sample run of every task on the public sample split (never the hidden one), through ``grader.rank``,
    under ``options.limits`` (the step names them and ``limits_source``)."""
    spec = options.benchmark.spec
    split = spec.sample_split
    if split == spec.default_split:
        report.add(
            StepResult(
                SAMPLE_RUN,
                "failed",
                f"the sample split {split!r} is the hidden split; check never runs on it",
                "configure a public sample_split in benchmark.json",
            )
        )
        return None
    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="grader-check-")))
    # Container logs go to the scratch folder, not OUT/logs: check writes nothing where it runs.
    options = dataclasses.replace(options, out_dir=scratch)
    runs: list[_SampleOutcome] = []
    for name in options.tasks:
        try:
            inputs = load_task_inputs(options.benchmark.task(name), split)
            runs.append(_sample_task(grader, inputs, options, scratch / name))
        except TaskFailure as failure:
            report.add(StepResult(SAMPLE_RUN, "failed", f"{name}: {failure}", failure.hint or _failure_hint(failure.code)))
            return None
        except GraderError as error:
            report.add(StepResult(SAMPLE_RUN, "failed", f"{name}: {error}", _hint(error, "the public sample split must exist for every task")))
            return None
    details = [f"{r.name}: {len(r.inputs.documents)} documents, {len(r.inputs.queries)} queries in {r.elapsed_s:.1f} s" for r in runs]
    report.add(
        StepResult(
            SAMPLE_RUN,
            "passed",
            f"ran on the public {split!r} split of {len(runs)} task(s) in the grading sandbox under {describe_limits(options)} ({limits_source})",
            details=details,
            data={"limits": options.limits.as_report(), "limits_source": limits_source},
        )
    )
    return runs


def _validation_step(report: CheckReport, runs: list[_SampleOutcome], manifest: Manifest, options: RunOptions) -> bool:
    """4. Output validation: every problem in what the containers wrote; whether there were none."""
    errors: list[str] = []
    for task_run in runs:
        errors.extend(_validate(task_run, manifest, options))
    if errors:
        report.add(
            StepResult(
                VALIDATION, "failed", f"{len(errors)} problem(s) in the output", "see docs/protocol.md for the output format", details=listed(errors)
            )
        )
        return False
    report.add(StepResult(VALIDATION, "passed", "outputs match their schemas; every query answered, ids known and unique"))
    return True


def _score_step(runs: list[_SampleOutcome], options: RunOptions) -> StepResult:
    """5. The sample score of each task's ranking (it says nothing about the hidden split)."""
    spec = options.benchmark.spec
    primary = options.effective_measures()[0]
    lines = []
    scores: dict[str, float] = {}
    for task_run in runs:
        if task_run.run is None:
            continue
        evaluation = evaluate(task_run.inputs.qrels, task_run.run, [primary], options.policy)
        scores[task_run.name] = evaluation.mean(primary)
        lines.append(f"{task_run.name}: {primary} = {scores[task_run.name]:.4f} ({evaluation.counts.evaluated} queries)")
    return StepResult(
        SCORE,
        "passed",
        f"sample score on the public {spec.sample_split!r} split; it says nothing about the hidden {spec.default_split!r} split",
        details=lines,
        data={"scores": scores, "measure": str(primary)},
    )


#: What to do about each failure code (a test checks every code has one).
FAILURE_HINTS: dict[FailureCode, str] = {
    FailureCode.TIMEOUT: "make it faster or ask the host for a longer --time-limit",
    FailureCode.OOM: "use less memory (stream the corpus, smaller batches) or ask for a larger --memory",
    FailureCode.NONZERO_EXIT: "run the image by hand on a staged /input (docs/protocol.md) and read its stderr",
    FailureCode.OUTPUT_MISSING: "write every output file the mode asks for (docs/protocol.md)",
    FailureCode.OUTPUT_INVALID: "see docs/protocol.md for the output format",
    FailureCode.OUTPUT_TOO_LARGE: "write less: the output caps are in docs/protocol.md",
    FailureCode.IMAGE_INVALID: "fix the image: linux/amd64, a non-root USER, present locally (or in the submission's own docker save .tar)",
    FailureCode.INFRA: "not the submission's fault: ask the host to check the container engine",
    FailureCode.MODEL_ERROR: "run the model on a few texts locally; check input names and output shape",
    FailureCode.INPUT_INVALID: "see docs/protocol.md",
    FailureCode.NONDETERMINISTIC: "grade the model twice locally (`grader run`) and compare the runs; nothing was charged",
}


def _failure_hint(code: FailureCode) -> str:
    return FAILURE_HINTS.get(code, "see docs/protocol.md")


def _sample_task(grader: TaskGrader, inputs: TaskInputs, options: RunOptions, scratch: Path) -> _SampleOutcome:
    """Rank one task through ``grader.rank``, as grading does; keep a container's output to list every problem in it."""
    name = inputs.task.name
    mode = getattr(grader, "mode", None)
    kept = scratch / "output" if mode is not None else None
    # A container sees pseudonyms (docs/protocol.md): its output is validated against those, as collecting does.
    ids_seen = getattr(grader, "staged_ids", None)
    staged = ids_seen(inputs) if ids_seen is not None else None
    started = time.monotonic()
    try:
        ranked = grader.rank(inputs, options, SilentProgress(), keep_output=kept)
    except TaskFailure as failure:
        if kept is None or not failure.code.about_outputs:
            raise
        return _SampleOutcome(name, inputs, time.monotonic() - started, output_failure=failure, kept_output=kept, mode=mode, staged_ids=staged)
    return _SampleOutcome(
        name, inputs, time.monotonic() - started, run=ranked.run, kept_output=kept, mode=mode, staged_ids=staged, dimension=ranked.dimension
    )


def _validate(task_run: _SampleOutcome, manifest: Any, options: RunOptions) -> list[str]:
    """Every problem of one task's output, prefixed with the task name."""
    name = task_run.name
    if task_run.kept_output is None or task_run.mode is None or task_run.staged_ids is None:
        return []  # in-process encoders: the encoder validated its own output
    query_ids, doc_ids = task_run.staged_ids
    problems = output_problems(
        task_run.kept_output,
        mode=task_run.mode,
        query_ids=query_ids,
        doc_ids=doc_ids,
        top_k=options.top_k,
        max_bytes=options.limits.output_bytes,
    )
    if task_run.output_failure is not None and not problems:
        problems.append(task_run.output_failure.detail)
    return [f"{name}: {problem}" for problem in problems]


def _estimate(runs: list[_SampleOutcome], options: RunOptions) -> StepResult:
    spec = options.benchmark.spec
    limits = options.limits
    details: list[str] = []
    over: list[str] = []
    # An in-process (ONNX) sample ran in the grading child process (grader/grading/inprocess.py): its peak
    # is a waited-for child's, not this process's own.
    peak_rss = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) * 1024
    for task_run in runs:
        sample = len(task_run.inputs.documents) + len(task_run.inputs.queries)
        full = spec.full_size(task_run.name)
        if full is None:
            details.append(f"{task_run.name}: no known size of the hidden split; no estimate")
            continue
        corpus, queries = full
        seconds = task_run.elapsed_s * (corpus + queries) / max(sample, 1)
        memory = ""
        if task_run.dimension:
            vectors = (corpus + queries) * task_run.dimension * 4 * 2
            memory = f", about {(peak_rss + vectors) / 2**30:.1f} GiB"
            if peak_rss + vectors > limits.memory_bytes:
                over.append(f"{task_run.name}: memory estimate over the {limits.memory_bytes / 2**30:.1f} GiB limit")
        details.append(f"{task_run.name}: {corpus} documents + {queries} queries: about {seconds:.0f} s{memory} (limit {limits.time_limit_s:.0f} s)")
        if seconds > limits.time_limit_s:
            over.append(f"{task_run.name}: about {seconds:.0f} s, over the {limits.time_limit_s:.0f} s time limit")
    if over:
        return StepResult(ESTIMATE, "failed", "; ".join(over), "make it faster, or ask the host about --time-limit/--memory", details=details)
    return StepResult(ESTIMATE, "passed", "extrapolated from the sample's measured throughput", details=details)
