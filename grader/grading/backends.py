"""Which task grader grades a submission: the one place that picks a backend for a manifest.

``grader run`` (:func:`grader.grading.runner.grade_submission`), ``grader check``
(:mod:`grader.check.checker`) and the hosting workers all call
:func:`prepare_task_grader`, then :meth:`~grader.grading.interfaces.TaskGrader.rank`
for each task: the same backend, the same ranking, whoever asks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.errors import UsageError
from grader.grading.interfaces import RunOptions, TaskGrader
from grader.submissions.digest import submission_digest
from grader.submissions.manifest import DockerManifest, Manifest, OnnxManifest

RUNNER_IMAGE = os.environ.get("GRADER_RUNNER_IMAGE", "grader-runner:dev")


@dataclass(frozen=True)
class PreparedGrader:
    """A task grader ready to rank, with what the report says about it."""

    grader: TaskGrader
    #: ``docker`` or ``none``
    sandbox: str
    #: why that sandbox (what ``--sandbox auto`` says on stderr)
    why: str
    #: the report's ``subject``: the submission (or its image) and its digest
    subject: dict[str, Any]
    #: what the backend's intake found, in one line (``grader check`` shows it)
    intake: str

    @property
    def digest(self) -> str:
        return str(self.subject["digest"]["sha256"])


def choose_sandbox(requested: str, manifest: Manifest) -> tuple[str, str]:
    """``docker`` or ``none``, and why (what ``auto`` says on stderr)."""
    from grader.sandbox.engine import engine_available

    if isinstance(manifest, DockerManifest):
        if requested == "none":
            raise UsageError("a Docker image submission can only run in the Docker sandbox (--sandbox docker or auto)")
        return "docker", "a Docker image submission runs in the Docker sandbox"
    if requested == "auto":
        if not engine_available():
            return "none", "no Docker engine answers; the ONNX encoder runs in a child process, NOT isolated (time and memory limits still apply)"
        if not _image_present(RUNNER_IMAGE):
            return (
                "none",
                f"the runner image {RUNNER_IMAGE} is missing (build it with `make images`); the ONNX encoder runs in a child process, NOT isolated",
            )
        return "docker", f"a Docker engine answers and the runner image {RUNNER_IMAGE} is present"
    return requested, f"--sandbox {requested} was asked for"


def _image_present(reference: str) -> bool:
    from grader.sandbox.engine import docker_client

    try:
        docker_client().images.get(reference)
    except Exception:
        return False
    return True


def prepare_task_grader(folder: Path, manifest: Manifest, options: RunOptions) -> PreparedGrader:
    """The task grader for the submission unpacked in ``folder``, after its backend's intake (an image is inspected).

    Raises :class:`UsageError` for options the chosen sandbox cannot honour,
    :class:`grader.errors.SubmissionError` for a model or tokenizer that fails the static checks,
    :class:`grader.errors.TaskFailure` (``IMAGE_INVALID``) for an unusable image,
    :class:`grader.errors.SandboxUnavailable` when the engine or the runner image fails.
    """
    sandbox, why = choose_sandbox(options.sandbox, manifest)
    if sandbox == "none" and "--runtime" in options.explicit_limits:
        raise UsageError("--runtime: only the Docker sandbox can honour this; in-process grading enforces --time-limit, --memory and --cpus")
    subject: dict[str, Any] = {"kind": "onnx", "name": manifest.name, "digest": {"sha256": submission_digest(folder)}}
    if sandbox == "docker":
        from grader.grading.sandboxed import DockerTaskGrader

        docker_grader = DockerTaskGrader.prepare(folder, manifest, options, runner_image=RUNNER_IMAGE)
        if isinstance(manifest, DockerManifest):
            subject = {
                "kind": "docker-image",
                "name": manifest.name,
                "digest": {"sha256": docker_grader.image.digest},
                "image": manifest.image,
                "mode": manifest.mode,
            }
        image = docker_grader.image
        intake = f"image {image.reference} ({image.id[:19]}...), user {image.user}, {image.size / 1e6:.0f} MB; sandbox docker"
        return PreparedGrader(docker_grader, sandbox, why, subject, intake)
    if isinstance(manifest, OnnxManifest):
        from grader.grading.inprocess import ChildProcessOnnx
        from grader.retrieval.encoder import load_tokenizer
        from grader.submissions.onnx_intake import inspect_onnx_model

        # The static checks here, once, before any task: a model that cannot fit its manifest stops the run with
        # one line (the session itself is created in each task's limited child).
        info = inspect_onnx_model(folder, manifest)
        load_tokenizer(folder / manifest.tokenizer, manifest.max_length)
        dimension = info.dimension if info.dimension is not None else "dynamic"
        intake = f"model and tokenizer load; inputs {', '.join(info.inputs)}; dimension {dimension}; sandbox none (in a child process)"
        child = ChildProcessOnnx(folder, manifest, options.threads, options.limits, pin_cpus="--cpus" in options.explicit_limits)
        return PreparedGrader(child, sandbox, why, subject, intake)
    raise UsageError("a Docker image submission needs the Docker sandbox")  # pragma: no cover - choose_sandbox refuses it first
