"""One task of a submission in the sandbox: run its container, classify how it ended, hand back its ``/output``.

Reading and validating what the container wrote is the next stage's job
(:mod:`grader.collect`): this module only says how the container ended.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.sandbox.container import ContainerOutcome, Mount, run_container
from grader.sandbox.limits import SandboxLimits
from grader.sandbox.output_dir import OutputDir, output_dir
from grader.sandbox.progress_file import POLL_EVERY_S, PROGRESS_FILE, ProgressWatch
from grader.sandbox.staging import StagedTask

#: 128 + SIGXFSZ: the fsize ulimit stopped a write.
_EXIT_FILE_TOO_LARGE = 153


@dataclass(frozen=True)
class FinishedContainer:
    """A task's container after it exited: how it ended, and its ``/output`` folder (readable inside the ``with``)."""

    outcome: ContainerOutcome
    #: the host folder that was the container's ``/output``; removed when the ``with`` block ends
    output: Path
    #: how the output cap was enforced (``disk-image`` or ``fsize-ulimit``)
    output_enforcement: str
    #: what explains an unsuccessful container (:func:`classify`), or None when it exited 0 within its limits
    failure: TaskFailure | None


def classify(
    outcome: ContainerOutcome, output: OutputDir, *, time_limit_s: float | None = None, model_error_exit: int | None = None
) -> TaskFailure | None:
    """The :class:`TaskFailure` that explains an unsuccessful container, or None.

    The container's last stderr line travels apart from the grader's message
    (``container_words``), escaped and bounded, so a report of a hidden split can
    leave it out. ``model_error_exit`` is the exit status by which the grader's own
    runner image says that the submitted model failed: ``MODEL_ERROR``, as in-process.
    """
    words = outcome.stderr_tail or None
    if outcome.timed_out:
        # The limit itself: the elapsed time also counts the kill and the wait for it.
        limit = outcome.elapsed_s if time_limit_s is None else time_limit_s
        return TaskFailure(FailureCode.TIMEOUT, f"killed after the {limit:g} s time limit", container_words=words)
    if outcome.oom_killed:
        return TaskFailure(FailureCode.OOM, "killed by the kernel for exceeding the memory limit", container_words=words)
    if outcome.exit_code == _EXIT_FILE_TOO_LARGE or output.full():
        return TaskFailure(FailureCode.OUTPUT_TOO_LARGE, f"the output exceeded its {output.cap_bytes}-byte cap", container_words=words)
    if model_error_exit is not None and outcome.exit_code == model_error_exit:
        return TaskFailure(FailureCode.MODEL_ERROR, "the model failed while encoding", container_words=words)
    if outcome.exit_code != 0:
        return TaskFailure(FailureCode.NONZERO_EXIT, f"exit status {outcome.exit_code}", container_words=words)
    return None


@contextlib.contextmanager
def run_task_container(
    image_id: str,
    staged: StagedTask,
    *,
    limits: SandboxLimits,
    log_path: Path | None,
    extra_mounts: list[Mount] | None = None,
    environment: dict[str, str] | None = None,
    scratch: Path | None = None,
    model_error_exit: int | None = None,
    on_encoded: Callable[[int], None] | None = None,
    progress_step: int = 1,
) -> Iterator[FinishedContainer]:
    """Run the task's container on ``staged``; yield how it ended and its ``/output`` folder.

    The folder (a capped disk image or a plain folder) lives until the ``with``
    block ends: read what is needed inside it. The container's failure, if any, is
    in :attr:`FinishedContainer.failure`, not raised, so that a checker can copy the
    raw output before it is reported.

    With ``on_encoded`` (an advance callback of a :class:`~grader.grading.interfaces.ProgressListener`),
    the container's optional ``/output/progress.json`` is looked at about once a second while it runs and
    once after it exited; what it adds to the documents encoded goes there (:class:`ProgressWatch`, in steps of
    ``progress_step``). Nothing the file says changes how the container ended or what it returned.
    """
    with output_dir(scratch, limits.output_bytes, limits.tmp_bytes) as output:
        owned = [folder for folder in (output.scratch, staged.folder.parent) if folder is not None]
        watch = None if on_encoded is None else ProgressWatch(output.path, total=len(staged.doc_ids), advance=on_encoded, step=progress_step)
        outcome = run_container(
            image_id,
            mounts=[Mount(staged.folder, "/input", True), Mount(output.path, "/output", False), *(extra_mounts or [])],
            limits=limits,
            log_path=log_path,
            environment=environment,
            tmp_path=output.tmp_path,
            scratch_folders=owned,
            tick=None if watch is None else watch.poll,
            tick_every_s=POLL_EVERY_S,
        )
        if watch is not None:
            watch.poll()  # the last word of a container that ended between two looks
        # Never a result, and never counted against the cap: gone before the output is judged (a link is removed, not followed).
        with contextlib.suppress(OSError):
            os.unlink(output.path / PROGRESS_FILE)
        failure = classify(outcome, output, time_limit_s=limits.time_limit_s, model_error_exit=model_error_exit)
        yield FinishedContainer(outcome, output.path, output.enforcement, failure)
