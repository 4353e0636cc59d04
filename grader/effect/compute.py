"""EffectMRR of an augmented encoder over a base encoder (CAT, Phan et al. 2023, Formula 6).

For each task and each dimension ``d``:

* base vectors (``Q_b``, ``C_b``) and augmented vectors (``Q_a``, ``C_a``) are each
  reduced to ``d`` by their *own* PCA, fitted on that side's stacked queries and
  candidates (:func:`grader.retrieval.pca.reduce`; no reduction when ``d`` is at
  least the side's native dimension, or when no dimension is asked), then
  L2-normalised, so inner products are cosines;
* ``MRR_org`` is the MRR of the base cosine ranking, ``MRR_com`` the MRR of
  ``S = (1 - W) * minmax(cos_b) + W * cos_a`` (global min-max), both under the
  strict policy with trec_eval's tie order, and ``EffectMRR = MRR_com - MRR_org``.

``Average_EffectMRR`` is the plain mean over every (task, dimension) configuration.
The measure is the benchmark's primary one when it is an MRR@k, else MRR@1000.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import grader
from grader import jsonio
from grader.data.benchmark import Benchmark, BenchmarkSpec
from grader.effect.combine import DEFAULT_BLOCK_ELEMENTS, Combined, combine_rankings
from grader.effect.inputs import RunFolder
from grader.errors import ReportError, UsageError
from grader.files import atomic_write_text
from grader.metrics.measures import Family, Measure, parse_measure
from grader.metrics.ordering import byte_order_ranks
from grader.metrics.policy import Policy, evaluate
from grader.retrieval.pca import reduce
from grader.retrieval.search import rankings_to_run

#: The measure used when the benchmark's primary measure is not an MRR.
DEFAULT_MEASURE = Measure(Family.MRR, 1000)


def effect_measure(spec: BenchmarkSpec) -> Measure:
    """The benchmark's primary measure if it is an MRR@k, else MRR@1000."""
    primary = parse_measure(spec.primary_measure)
    return primary if primary.family is Family.MRR else DEFAULT_MEASURE


def check_weight(weight: float) -> float:
    """W must be a number in [0, 1]."""
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not math.isfinite(weight) or not 0.0 <= weight <= 1.0:
        raise UsageError(f"--weight must be a number in [0, 1], got {weight!r}")
    return float(weight)


@dataclass(frozen=True)
class Configuration:
    """The EffectMRR of one task at one dimension."""

    task: str
    dimension: int | None
    pca_applied: Mapping[str, bool]
    dimensions: Mapping[str, int]
    mrr_org: float
    mrr_com: float
    base_cosine_range: tuple[float, float]

    @property
    def effect_mrr(self) -> float:
        return self.mrr_com - self.mrr_org

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "dimension": self.dimension,
            "pca_applied": dict(self.pca_applied),
            "dimensions": dict(self.dimensions),
            "mrr_org": self.mrr_org,
            "mrr_com": self.mrr_com,
            "effect_mrr": self.effect_mrr,
            "base_cosine_range": list(self.base_cosine_range),
        }


def task_configuration(
    task: str,
    qrels: Mapping[str, Mapping[str, int]],
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    base: tuple[np.ndarray, np.ndarray],
    augmented: tuple[np.ndarray, np.ndarray],
    *,
    weight: float,
    dimension: int | None,
    measure: Measure = DEFAULT_MEASURE,
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> Configuration:
    """EffectMRR of one task at ``dimension`` (None: native), from row-aligned (queries, corpus) pairs."""
    weight = check_weight(weight)
    projected = {}
    for side, (queries, corpus) in (("base", base), ("augmented", augmented)):
        projected[side] = reduce(queries, corpus, queries.shape[1] if dimension is None else dimension)
    doc_ranks = byte_order_ranks(doc_ids)
    combined: Combined = combine_rankings(
        projected["base"].queries,
        projected["base"].corpus,
        projected["augmented"].queries,
        projected["augmented"].corpus,
        weight,
        measure.cutoff,
        doc_ranks,
        block_elements=block_elements,
    )
    means = []
    for ranking in (combined.base, combined.combined):
        run = rankings_to_run(query_ids, doc_ids, ranking.scores, ranking.indices, doc_ranks=doc_ranks)
        means.append(evaluate(qrels, run, [measure], Policy.STRICT).mean(measure))
    return Configuration(
        task=task,
        dimension=dimension,
        pca_applied={side: p.applied for side, p in projected.items()},
        dimensions={side: int(p.queries.shape[1]) for side, p in projected.items()},
        mrr_org=means[0],
        mrr_com=means[1],
        base_cosine_range=(combined.base_min, combined.base_max),
    )


def average_effect(configurations: Sequence[Configuration]) -> float:
    """Mean EffectMRR over all configurations (every task at every dimension counts once)."""
    if not configurations:
        raise UsageError("no (task, dimension) configuration to average")
    return math.fsum(c.effect_mrr for c in configurations) / len(configurations)


def compute_effect(
    benchmark: Benchmark,
    base_path: str | Path,
    augmented_path: str | Path,
    weight: float,
    *,
    split: str | None = None,
    tasks: Sequence[str] | None = None,
    dimensions: Sequence[int] = (),
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> dict[str, Any]:
    """The EffectMRR result (a JSON-ready dict) of two ``grader run --keep-embeddings`` folders."""
    weight = check_weight(weight)
    split = split or benchmark.spec.default_split
    measure = effect_measure(benchmark.spec)
    base = RunFolder.load(base_path, "base")
    augmented = RunFolder.load(augmented_path, "augmented")
    for folder in (base, augmented):
        folder.check_benchmark(benchmark)
    if tasks:
        names = benchmark.select(list(tasks))
    else:
        names = [name for name in benchmark.spec.tasks if name in set(base.graded_tasks())]
        if not names:
            raise UsageError(f"--base: {base.report_path} grades no task of benchmark {benchmark.name!r}")
    dims: list[int | None] = list(dimensions) if dimensions else [None]
    configurations: list[Configuration] = []
    for name in names:
        task = benchmark.task(name)
        data_digest = task.split_digest(split)
        for folder in (base, augmented):
            folder.check_task(task, split, data_digest)
        qrels = task.qrels(split)
        query_set = {query.id for query in task.iter_queries() if query.id in qrels}
        doc_set = {document.id for document in task.iter_corpus()}
        base_vectors = base.embeddings(name)
        augmented_vectors = augmented.embeddings(name)
        for vectors in (base_vectors, augmented_vectors):
            vectors.check_ids(query_set, doc_set)
        query_ids, doc_ids = base_vectors.query_ids, base_vectors.doc_ids
        base_pair = (base_vectors.queries, base_vectors.corpus)
        augmented_pair = augmented_vectors.aligned_to(query_ids, doc_ids)
        for dimension in dims:
            configurations.append(
                task_configuration(
                    name, qrels, query_ids, doc_ids, base_pair, augmented_pair,
                    weight=weight, dimension=dimension, measure=measure, block_elements=block_elements,
                )
            )
    return {
        "kind": "effect",
        "grader": {"name": "grader", "version": grader.__version__},
        "weight": weight,
        "benchmark": benchmark.name,
        "split": split,
        "measure": str(measure),
        "policy": Policy.STRICT.value,
        "base": {"report": str(base.report_path), "subject": base.subject},
        "augmented": {"report": str(augmented.report_path), "subject": augmented.subject},
        "configurations": [c.as_dict() for c in configurations],
        "average_effect_mrr": average_effect(configurations),
        "labels": {"base": base.labels, "augmented": augmented.labels},
    }


def effect_json(result: Mapping[str, Any]) -> str:
    """The result as JSON text: sorted keys, indent 2, trailing newline, no NaN."""
    try:
        return jsonio.dumps(result, sort_keys=True, indent=2, ensure_ascii=True) + "\n"
    except (TypeError, ValueError) as error:
        raise ReportError(f"effect result cannot be written as JSON: {error}") from None


def write_effect(result: Mapping[str, Any], path: str | Path) -> Path:
    """Write the result atomically to ``path``."""
    try:
        return atomic_write_text(path, effect_json(result))
    except OSError as error:
        raise ReportError(f"{path}: cannot write: {error.strerror or error}") from None


def format_effect_table(result: Mapping[str, Any]) -> str:
    """A readable table: one line per (task, dimension), then the average."""
    measure = result["measure"]
    configurations = result["configurations"]
    width = max([len("task")] + [len(c["task"]) for c in configurations])
    lines = [
        f"EffectMRR on {result['benchmark']} ({result['split']}), W = {result['weight']:g}, {measure}",
        f"base:      {result['base']['subject'].get('name', '?')} ({result['base']['report']})",
        f"augmented: {result['augmented']['subject'].get('name', '?')} ({result['augmented']['report']})",
    ]
    header = f"{'task':<{width}}  {'dimension':>9}  {'PCA b/a':>7}  {'MRR_org':>8}  {'MRR_com':>8}  {'EffectMRR':>9}"
    lines += [header, "-" * len(header)]
    for c in configurations:
        dimension = "native" if c["dimension"] is None else str(c["dimension"])
        pca = "/".join("y" if c["pca_applied"][side] else "n" for side in ("base", "augmented"))
        lines.append(f"{c['task']:<{width}}  {dimension:>9}  {pca:>7}  {c['mrr_org']:>8.4f}  {c['mrr_com']:>8.4f}  {c['effect_mrr']:>+9.4f}")
    lines.append(f"Average_EffectMRR over {len(configurations)} configuration(s) = {result['average_effect_mrr']:+.4f}")
    return "\n".join(lines) + "\n"
