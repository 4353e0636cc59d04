"""A shard job of an ONNX submission in the sandbox, over a worker's pseudonymous copy.

A sharded grade's jobs run the submitted model where an unsharded grade runs it: in the
grader's runner image (:mod:`grader.sandbox.onnx_entry`), no network, the competition's
limits (the time limit and the output cap apply per job), staged under the copy's ids
(:class:`~grader.sandbox.blinding.Preblinded`):

* the *query job* (:func:`encode_queries`) stages the task's judged queries only
  (``"encode": "queries"``), reads ``queries.npy`` as collecting does and returns the
  vectors packed in the canonical order of the query ids (the order a compact run lists them);
* a *shard job* (:func:`rank_shard`) stages its shard's documents only
  (:func:`grader.grading.shard_input.read_shard`; ``"encode": "documents"``), then reads the
  container's ``corpus.npy`` (once the query vectors are in: the job may start before them) block by block into one reused buffer bounded by
  ``search_memory`` (header checked first, a non-finite value the model's fault), searches
  each block exactly against the query vectors and merges the blocks' lists: the shard's
  top ``depth`` and boundary ties as a compact run with float64 scores over the whole corpus's
  canonical indexes, searched and written to the job's output file a block of queries at a time
  (:func:`grader.retrieval.shard_output.search_to_file`: the lists held do not grow with the query count).

A shard job whose query vectors (another worker's output) do not fit its document vectors encodes
the queries itself (:func:`judge_mismatch`): only a mismatch it reproduces is ``MODEL_ERROR``.

A container's failure is the task's failure with its code (``TIMEOUT``, ``OOM``,
``MODEL_ERROR``, ``OUTPUT_TOO_LARGE``...), classified as for a whole grade
(:func:`grader.sandbox.task_run.classify`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from grader.collect.outputs import embedding_blocks, read_embeddings_output
from grader.data.benchmark import Benchmark
from grader.data.task import Task
from grader.errors import DimensionMismatch, SuspectQueries, TaskFailure
from grader.failures import FailureCode
from grader.grading.cost import RankCost
from grader.grading.interfaces import RunOptions
from grader.grading.ranking import judged_queries
from grader.grading.sandboxed import DockerTaskGrader
from grader.grading.shard_input import read_shard
from grader.retrieval.encoder import BatchPolicy
from grader.retrieval.shard_exchange import MAX_DIMENSION, pack_vectors, search_width
from grader.retrieval.shard_output import query_block_for, search_to_file
from grader.retrieval.shard_run import block_rows_for
from grader.runs.ordering import byte_order_ranks
from grader.sandbox.blinding import Preblinded
from grader.sandbox.limits import SandboxLimits
from grader.sandbox.owner import owned_tempdir
from grader.sandbox.staging import StagedTask, stage_task
from grader.sandbox.task_run import FinishedContainer, run_task_container
from grader.sandbox.usage import ResourceUsage
from grader.submissions.manifest import OnnxManifest


@dataclass(frozen=True)
class ShardRunner:
    """The runner image prepared for one ONNX submission's shard jobs on a worker's copy."""

    docker: DockerTaskGrader
    manifest: OnnxManifest
    limits: SandboxLimits
    split: str
    depth: int

    @classmethod
    def prepare(
        cls,
        folder: Path,
        manifest: OnnxManifest,
        copy: Benchmark,
        key: Preblinded,
        *,
        limits: SandboxLimits,
        split: str,
        depth: int,
        runner_image: str,
    ) -> ShardRunner:
        """Inspect the runner image (:class:`~grader.errors.SandboxUnavailable` when unusable) for the submission unpacked in ``folder``."""
        options = RunOptions(benchmark=copy, tasks=[], split=split, out_dir=folder, sandbox="docker", limits=limits, blinding_key=key, top_k=depth)
        return cls(DockerTaskGrader.prepare(folder, manifest, options, runner_image=runner_image), manifest, limits, split, depth)

    def sandbox_facts(self) -> dict[str, Any]:
        """The sandbox a report of the sharded grade states: the runner image's, as for an unsharded grade, and ``sharded``."""
        return {**self.docker.report(), "sharded": True}

    def stage(self, scratch: Path, task: Task, *, queries: list, documents: list, encode: str) -> StagedTask:
        """Stage one side of ``task`` under the copy's ids in ``scratch`` (``encode``: ``queries`` or ``documents``)."""
        return stage_task(
            scratch / "input",
            task=task.name,
            split=self.split,
            mode="encode",
            top_k=self.depth,
            queries=queries,
            documents=documents,
            key=self.docker.blinding_key,
            query_prefix=self.manifest.query_prefix,
            document_prefix=self.manifest.document_prefix,
            encode=encode,
        )

    def container(self, staged: StagedTask, log_path: Path | None) -> Any:
        """Run the runner container on ``staged`` under the competition's limits (a context: :func:`run_task_container`)."""
        return run_task_container(
            self.docker.image.id,
            staged,
            limits=self.limits,
            log_path=log_path,
            extra_mounts=self.docker.extra_mounts,
            environment=self.docker.environment,
            model_error_exit=self.docker.model_error_exit,
        )


def _succeeded(finished: FinishedContainer) -> FinishedContainer:
    if finished.failure is not None:
        raise finished.failure
    return finished


def encode_queries(
    runner: ShardRunner, task: Task, judged: Sequence[str], *, log_path: Path | None = None, spent: list[RankCost] | None = None
) -> bytes:
    """The query job: the judged queries' vectors from the runner container, rows in canonical query order, packed
    (``spent``: what its container used is appended there)."""
    return pack_vectors(query_vectors(runner, task, judged, log_path=log_path, spent=spent))


def _container_cost(finished: FinishedContainer) -> RankCost:
    """What a job's container used, also when it failed (as an unsharded grade's: :meth:`DockerTaskGrader._note_outcome`)."""
    return RankCost(finished.outcome.elapsed_s, finished.outcome.usage or ResourceUsage.unmeasured("the engine gave no figures"))


def judge_mismatch(runner: ShardRunner, task: Task, judged: Sequence[str], mismatch: DimensionMismatch, *, received: str) -> TaskFailure:
    """What a shard job's dimension mismatch is, once this worker encoded the queries itself with the same runner.

    The query vectors it searched with (``received``: their sha256) are another worker's output, and one worker's word
    must not fail a participant: only a mismatch reproduced here (this worker's own query vectors misfit its document
    vectors too) is the model's fault, ``MODEL_ERROR``; otherwise the received vectors are suspect
    (:class:`~grader.errors.SuspectQueries`, ``INFRA``: the server re-runs the task's query job). A failure of the
    query encoding itself carries its own code, as the query job's would.
    """
    own = query_vectors(runner, task, judged).shape[1]
    if own != mismatch.documents:
        return TaskFailure(
            FailureCode.MODEL_ERROR,
            f"the model's query vectors have {own} dimensions and its document vectors {mismatch.documents} (reproduced on one worker)",
        )
    return SuspectQueries(
        f"the query vectors received have {mismatch.queries} dimensions; this worker's own have {own}, as its document vectors: they are suspect",
        sha256=received,
    )


def query_vectors(
    runner: ShardRunner, task: Task, judged: Sequence[str], *, log_path: Path | None = None, spent: list[RankCost] | None = None
) -> np.ndarray:
    """The judged queries' vectors from the runner container, rows in canonical query order (float32)."""
    queries = judged_queries(task, judged)  # the corpus is not read: a query job's memory does not grow with it
    with owned_tempdir("grader-stage-") as scratch:
        staged = runner.stage(scratch, task, queries=queries, documents=[], encode="queries")
        with runner.container(staged, log_path) as finished:
            if spent is not None:
                spent.append(_container_cost(finished))
            output = _succeeded(finished).output
            vectors = read_embeddings_output(output, "queries.npy", rows=len(staged.query_ids), max_bytes=runner.limits.output_bytes)
    if vectors.shape[1] > MAX_DIMENSION:
        raise TaskFailure(FailureCode.MODEL_ERROR, f"the model's vectors have {vectors.shape[1]} dimensions; at most {MAX_DIMENSION} are searched")
    ordered = np.empty_like(vectors)
    ordered[byte_order_ranks(list(staged.query_ids))] = vectors  # staged row i goes to its canonical place
    return ordered


def rank_shard(
    runner: ShardRunner,
    task: Task,
    number: int,
    query_vectors: Callable[[], np.ndarray],
    *,
    shard_documents: int | None,
    search_memory: int,
    target: Path,
    log_path: Path | None = None,
    spent: list[RankCost] | None = None,
) -> str:
    """Shard ``number`` of the task encoded in the runner container and searched in bounded blocks: its compact run with
    scores, written to ``target`` a block of queries at a time (:func:`~grader.retrieval.shard_output.search_to_file`);
    the run's sha256.

    ``query_vectors`` is called once the documents are encoded: a shard job claimed while its query job ran waits there
    for the vectors (its encoding done meanwhile). ``spent``: what its container used, and the search's wall seconds
    (the wait for the vectors counts in neither), is appended there.
    """
    shard = read_shard(task, number, chunk_size=BatchPolicy().chunk_size, shard_documents=shard_documents)
    rank_of = dict(zip((document.id for document in shard.documents), shard.ranks.tolist()))
    with owned_tempdir("grader-stage-") as scratch:
        staged = runner.stage(scratch, task, queries=[], documents=shard.documents, encode="documents")
        # Row i of corpus.npy is staged document i; its canonical index in the whole corpus names it in the run.
        ranks = np.asarray([rank_of[doc_id] for doc_id in staged.doc_ids], dtype=np.int64)
        with runner.container(staged, log_path) as finished:
            used = _container_cost(finished)
            output = _succeeded(finished).output
            queries = query_vectors()
            searching = time.monotonic()

            def blocks() -> Iterable[tuple[int, np.ndarray]]:
                return embedding_blocks(
                    output,
                    "corpus.npy",
                    rows=len(ranks),
                    max_bytes=runner.limits.output_bytes,
                    max_dimension=MAX_DIMENSION,
                    block_rows=lambda dimension: block_rows_for(search_memory, dimension),
                    fault=FailureCode.MODEL_ERROR,
                )

            block_queries = query_block_for(search_memory, search_width(runner.depth))
            digest = search_to_file(queries, blocks, ranks, target, documents=shard.corpus_size, depth=runner.depth, block_queries=block_queries)
            if spent is not None:
                spent.append(replace(used, search_s=time.monotonic() - searching))
    return digest
