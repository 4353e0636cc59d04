"""Tasks graded inside the Docker sandbox: image submissions, and ONNX in the runner image.

Each task goes through the stages in order: stage its input under pseudonymous ids
(:mod:`grader.sandbox.staging`), run its container (:mod:`grader.sandbox`), collect
and validate what it returned against those pseudonyms, then map it back to the
real ids (:mod:`grader.collect`), search (for embeddings).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grader.collect.outputs import TaskOutputs, collect_outputs, copy_outputs
from grader.collect.unblind import unblind_outputs
from grader.errors import SandboxUnavailable, TaskFailure, UsageError
from grader.failures import RUNNER_MODEL_ERROR_EXIT, FailureCode
from grader.grading.blinding_keys import blinding_key_for
from grader.grading.cost import RankCost
from grader.grading.interfaces import SEARCHING, ProgressListener, Ranked, RunOptions, TaskInputs
from grader.retrieval.search import search_run
from grader.runs.ties import keep_boundary_ties, tie_slack
from grader.sandbox.blinding import BlindingKey, Preblinded
from grader.sandbox.container import ContainerOutcome, Mount
from grader.sandbox.intake import ImageInfo, inspect_image
from grader.sandbox.limits import SandboxLimits
from grader.sandbox.output_dir import storage_report
from grader.sandbox.owner import owned_tempdir
from grader.sandbox.progress_file import image_step
from grader.sandbox.staging import StagedTask, stage_task, staged_ids
from grader.sandbox.task_run import run_task_container
from grader.sandbox.usage import ResourceUsage
from grader.submissions.manifest import DockerManifest, Manifest, OnnxManifest


@dataclass(frozen=True)
class SandboxedOutput:
    """One task's container: how it ended, and what it returned, read, validated and mapped back to the real ids."""

    outputs: TaskOutputs
    outcome: ContainerOutcome
    output_enforcement: str


def run_and_collect(
    image_id: str,
    staged: StagedTask,
    *,
    mode: str,
    limits: SandboxLimits,
    log_path: Path | None,
    extra_mounts: list[Mount] | None = None,
    environment: dict[str, str] | None = None,
    scratch: Path | None = None,
    keep_output: Path | None = None,
    model_error_exit: int | None = None,
    on_outcome: Callable[[ContainerOutcome], None] | None = None,
    on_encoded: Callable[[int], None] | None = None,
    progress_step: int = 1,
) -> SandboxedOutput:
    """Run the task's container (the sandbox), then read and validate its outputs and map them back (collect); or raise :class:`TaskFailure`.

    The outputs are validated against the pseudonyms the container saw (an id it was
    not given is ``OUTPUT_INVALID``), and only then handed back under the real ids, a
    run in trec order, vectors in the real ids' order (:mod:`grader.collect.unblind`).
    With ``keep_output``, the raw output files are copied there first (safely, and
    even when the container failed), so a checker can report every problem in them.
    ``on_outcome`` is told how the container ended before anything is validated (what it cost counts either way).
    ``on_encoded`` is told, while the container runs, how many more documents it says it encoded
    (its optional ``/output/progress.json``, :mod:`grader.sandbox.progress_file`, in steps of ``progress_step``).
    """
    with run_task_container(
        image_id,
        staged,
        limits=limits,
        log_path=log_path,
        extra_mounts=extra_mounts,
        environment=environment,
        scratch=scratch,
        model_error_exit=model_error_exit,
        on_encoded=on_encoded,
        progress_step=progress_step,
    ) as finished:
        if on_outcome is not None:
            on_outcome(finished.outcome)
        if keep_output is not None:
            copy_outputs(finished.output, keep_output, mode, max_bytes=limits.output_bytes)
        if finished.failure is not None:
            raise finished.failure
        outputs = collect_outputs(
            finished.output,
            mode=mode,
            query_ids=staged.query_ids,
            doc_ids=staged.doc_ids,
            top_k=int(staged.task_json["top_k"]),
            max_bytes=limits.output_bytes,
        )
        outputs = unblind_outputs(outputs, queries=staged.queries, documents=staged.documents)
        return SandboxedOutput(outputs, finished.outcome, finished.output_enforcement)


def _require_tar_inside(folder: Path, reference: str) -> None:
    """A ``docker save`` tar a submission names must lie inside it: no absolute path, ``..`` or link out."""
    if not reference.endswith(".tar"):
        return
    candidate = Path(reference)
    inside = not candidate.is_absolute() and (folder / candidate).resolve().is_relative_to(folder.resolve())
    if not inside:
        raise TaskFailure(
            FailureCode.IMAGE_INVALID,
            f"image {reference!r}: a docker save .tar must be a file inside the submission",
            hint="put the .tar in the submission folder and name it by a relative path",
        )


class DockerTaskGrader:
    """Runs each task in a fresh hardened container of one validated image."""

    def __init__(
        self,
        image: ImageInfo,
        mode: str,
        manifest: Manifest,
        extra_mounts: list[Mount],
        environment: dict[str, str],
        options: RunOptions,
        *,
        blinding_key: BlindingKey | Preblinded,
    ) -> None:
        self.image = image
        self.mode = mode
        self.manifest = manifest
        self.extra_mounts = extra_mounts
        self.environment = environment
        self.options = options
        #: Stages every task under pseudonymous ids (docs/protocol.md).
        self.blinding_key = blinding_key
        self.output_enforcement: str | None = None
        #: The runner image's exit status for "the submitted model failed" (MODEL_ERROR); images have none.
        self.model_error_exit = RUNNER_MODEL_ERROR_EXIT if isinstance(manifest, OnnxManifest) else None
        #: what the last :meth:`rank` used (the report's ``cost`` block), also when it failed; None before a container ran
        self.last_cost: RankCost | None = None

    @classmethod
    def prepare(cls, folder: Path, manifest: Manifest, options: RunOptions, *, runner_image: str) -> DockerTaskGrader:
        """Validate the image (the submission's, or the runner image for ONNX)."""
        if isinstance(manifest, DockerManifest):
            if manifest.mode == "translate":
                # The submission's own choice of mode, so its fault (charged), wherever it is graded.
                raise TaskFailure(
                    FailureCode.IMAGE_INVALID,
                    "translate-mode images are graded by `grader score-translation`, not on retrieval tasks",
                    hint="submit a retrieve- or encode-mode image to a retrieval benchmark",
                )
            _require_tar_inside(folder, manifest.image)
            image = inspect_image(manifest.image, base=folder, submission_only=options.images_from_submission_only)
            return cls(image, manifest.mode, manifest, [], {}, options, blinding_key=blinding_key_for(options))
        if isinstance(manifest, OnnxManifest):
            try:
                image = inspect_image(runner_image, base=folder)
            except TaskFailure as failure:
                raise SandboxUnavailable(f"the grader's runner image is unusable: {failure.detail}", hint="build it with `make images`") from None
            mounts = [Mount(folder.resolve(), "/submission", True)]
            threads = str(max(1, int(options.limits.cpus)))
            return cls(image, "encode", manifest, mounts, {"GRADER_THREADS": threads}, options, blinding_key=blinding_key_for(options))
        raise UsageError(f"unknown submission kind {manifest.kind!r}")  # pragma: no cover

    def report(self) -> dict[str, Any]:
        """The sandbox settings the report records.

        For an image submission, ``image_origin`` says whether the image came from the
        submission's own docker save tar (``submission``) or was already on the host (``host``).
        ``blinding`` names the key that made the ids the container saw (its scheme and id,
        never the key); being part of these settings, it is part of each stored task's key too.
        """
        settings: dict[str, Any] = {
            "kind": "docker",
            "image": self.image.id,
            "mode": self.mode,
            "network": "none",
            "read_only_root": True,
            "capabilities": "all dropped",
            "limits": self.options.limits.as_report(),
            "storage": storage_report(),
            "isolated": True,
            "blinding": self.blinding_key.report(),
        }
        if isinstance(self.manifest, DockerManifest):
            settings["image_origin"] = self.image.origin
        return settings

    def _note_outcome(self, outcome: ContainerOutcome) -> None:
        """Keep what the container used, also when it failed (a failed container used its resources too)."""
        usage = outcome.usage or ResourceUsage.unmeasured("the engine gave no figures")
        self.last_cost = RankCost(outcome.elapsed_s, usage)

    def staged_ids(self, inputs: TaskInputs) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The query and document ids this task's container sees (pseudonyms, in staged order), without staging.

        ``grader check`` validates a kept output against them, as collecting does.
        """
        return staged_ids(self.blinding_key, inputs.task.name, inputs.queries, inputs.documents)

    def rank(self, inputs: TaskInputs, options: RunOptions, progress: ProgressListener, *, keep_output: Path | None = None) -> Ranked:
        """Stage the task, run one container, collect and validate its output (copied to ``keep_output`` first, if given)."""
        self.last_cost = None
        prefixes = {"query_prefix": getattr(self.manifest, "query_prefix", ""), "document_prefix": getattr(self.manifest, "document_prefix", "")}
        log_path = options.out_dir / "logs" / f"{inputs.task.name}.log"
        # What the container says it encoded (/output/progress.json): the runner image's counts as they are,
        # a submitted image's in twentieths of the corpus (grader.sandbox.progress_file).
        encoded = progress.progress(f"{inputs.task.name}: corpus", len(inputs.documents))
        step = 1 if isinstance(self.manifest, OnnxManifest) else image_step(len(inputs.documents))
        with owned_tempdir("grader-stage-") as scratch:
            staged = stage_task(
                scratch / "input",
                task=inputs.task.name,
                split=options.split,
                mode=self.mode,
                top_k=options.top_k,
                queries=inputs.queries,
                documents=inputs.documents,
                key=self.blinding_key,
                **prefixes,
            )
            sandboxed = run_and_collect(
                self.image.id,
                staged,
                mode=self.mode,
                limits=options.limits,
                log_path=log_path,
                extra_mounts=self.extra_mounts,
                environment=self.environment,
                model_error_exit=self.model_error_exit,
                keep_output=keep_output,
                on_outcome=self._note_outcome,
                on_encoded=encoded,
                progress_step=step,
            )
        output = sandboxed.outputs
        extra: dict[str, Any] = {"encoding": output.encoding} if output.encoding else {}
        if output.run is not None:
            return Ranked(output.run, extra)
        if output.query_vectors is None or output.corpus_vectors is None:  # pragma: no cover - encode mode returns both
            raise TaskFailure(FailureCode.OUTPUT_MISSING, "the container returned no embeddings")
        progress.stage(inputs.task.name, SEARCHING)
        # The grader's own runner image encodes ONNX models: their bad vectors are the model's fault.
        fault = FailureCode.MODEL_ERROR if isinstance(self.manifest, OnnxManifest) else FailureCode.OUTPUT_INVALID
        if isinstance(self.blinding_key, Preblinded):
            # A worker's copy: its ids are pseudonyms, so it keeps the boundary tie group and the server cuts at the
            # depth under the real ids (grader.runs.ties); a cut here would follow the pseudonyms.
            slack = options.top_k + tie_slack(options.top_k)
            searching = time.monotonic()
            run = search_run(staged.real_query_ids, staged.real_doc_ids, output.query_vectors, output.corpus_vectors, slack, fault_code=fault)
            run = keep_boundary_ties(run, options.top_k)
        else:
            searching = time.monotonic()
            run = search_run(staged.real_query_ids, staged.real_doc_ids, output.query_vectors, output.corpus_vectors, options.top_k, fault_code=fault)
        if self.last_cost is not None:
            self.last_cost = replace(self.last_cost, search_s=time.monotonic() - searching)
        return Ranked(run, extra, output.query_vectors, output.corpus_vectors)
