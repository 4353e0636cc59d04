"""One task of a submission in the sandbox: stage, run, classify, read outputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.runs.run import Run
from grader.sandbox.container import ContainerOutcome, Mount, run_container
from grader.sandbox.limits import SandboxLimits
from grader.sandbox.output_dir import OutputDir, output_dir
from grader.sandbox.outputs import copy_outputs, read_embeddings_output, read_encoding_stats, read_run_output
from grader.sandbox.staging import StagedTask
from grader.sandbox.unblind import unblind_rows, unblind_run

#: 128 + SIGXFSZ: the fsize ulimit stopped a write.
_EXIT_FILE_TOO_LARGE = 153
#: Bound on a run.jsonl relative to what a full ranking needs (ids, scores, JSON).
_RUN_BYTES_PER_HIT = 512


@dataclass(frozen=True)
class SandboxedOutput:
    """What a task's container produced, validated."""

    run: Run | None
    query_vectors: np.ndarray | None
    corpus_vectors: np.ndarray | None
    outcome: ContainerOutcome
    output_enforcement: str
    encoding: dict[str, Any] | None = None


def classify(outcome: ContainerOutcome, output: OutputDir, *, time_limit_s: float | None = None, model_error_exit: int | None = None) -> None:
    """Raise the :class:`TaskFailure` that explains an unsuccessful container, if any.

    The container's last stderr line travels apart from the grader's message
    (``container_words``), escaped and bounded, so a report of a hidden split can
    leave it out. ``model_error_exit`` is the exit status by which the grader's own
    runner image says that the submitted model failed: ``MODEL_ERROR``, as in-process.
    """
    words = outcome.stderr_tail or None
    if outcome.timed_out:
        # The limit itself: the elapsed time also counts the kill and the wait for it.
        limit = outcome.elapsed_s if time_limit_s is None else time_limit_s
        raise TaskFailure(FailureCode.TIMEOUT, f"killed after the {limit:g} s time limit", container_words=words)
    if outcome.oom_killed:
        raise TaskFailure(FailureCode.OOM, "killed by the kernel for exceeding the memory limit", container_words=words)
    if outcome.exit_code == _EXIT_FILE_TOO_LARGE or output.full():
        raise TaskFailure(FailureCode.OUTPUT_TOO_LARGE, f"the output exceeded its {output.cap_bytes}-byte cap", container_words=words)
    if model_error_exit is not None and outcome.exit_code == model_error_exit:
        raise TaskFailure(FailureCode.MODEL_ERROR, "the model failed while encoding", container_words=words)
    if outcome.exit_code != 0:
        raise TaskFailure(FailureCode.NONZERO_EXIT, f"exit status {outcome.exit_code}", container_words=words)


def run_task_container(
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
) -> SandboxedOutput:
    """Run the task's container and return its validated output, or raise :class:`TaskFailure`.

    The output is read and validated under the pseudonyms the container saw, then
    handed back under the real ids (a run) or in the real ids' order (vectors):
    :mod:`grader.sandbox.unblind`. With ``keep_output``, the raw output files are copied there first (safely),
    so a checker can report every problem in them, not only the first.
    """
    with output_dir(scratch, limits.output_bytes, limits.tmp_bytes) as output:
        owned = [folder for folder in (output.scratch, staged.folder.parent) if folder is not None]
        outcome = run_container(
            image_id,
            mounts=[Mount(staged.folder, "/input", True), Mount(output.path, "/output", False), *(extra_mounts or [])],
            limits=limits,
            log_path=log_path,
            environment=environment,
            tmp_path=output.tmp_path,
            scratch_folders=owned,
        )
        if keep_output is not None:
            copy_outputs(output.path, keep_output, mode, max_bytes=limits.output_bytes)
        classify(outcome, output, time_limit_s=limits.time_limit_s, model_error_exit=model_error_exit)
        top_k = int(staged.task_json["top_k"])
        if mode == "retrieve":
            bound = min(limits.output_bytes, max(1 << 20, len(staged.query_ids) * min(top_k, len(staged.doc_ids)) * _RUN_BYTES_PER_HIT))
            run = read_run_output(output.path, query_ids=staged.query_ids, doc_ids=staged.doc_ids, top_k=top_k, max_bytes=bound)
            return SandboxedOutput(unblind_run(run, staged), None, None, outcome, output.enforcement)
        if mode == "encode":
            corpus = read_embeddings_output(output.path, "corpus.npy", rows=len(staged.doc_ids), max_bytes=limits.output_bytes)
            queries = read_embeddings_output(
                output.path, "queries.npy", rows=len(staged.query_ids), max_bytes=limits.output_bytes, dimension=corpus.shape[1]
            )
            queries, corpus = unblind_rows(queries, staged.queries), unblind_rows(corpus, staged.documents)
            return SandboxedOutput(None, queries, corpus, outcome, output.enforcement, read_encoding_stats(output.path))
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"mode {mode!r} is not supported for retrieval tasks")
