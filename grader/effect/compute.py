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

With several base encoders (CAT: GraphCodeBERT and UniXcoder) each is combined
with the same augmented encoder, so one configuration is a (task, base, dimension).
``Average_EffectMRR`` of a task (dataset) is the mean over its base models x
dimensions (CAT: 2 x 2 = 4 configurations), as the paper reports it per dataset;
the overall mean is the mean of the per-task averages (every task has the same
number of configurations, so it is also the mean over every configuration).
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
from grader.data.task import Task
from grader.effect.combine import DEFAULT_BLOCK_ELEMENTS, Combined, combine_rankings
from grader.effect.inputs import RunFolder
from grader.errors import ReportError, UsageError
from grader.files import atomic_write_text
from grader.metrics.measures import Family, Measure, parse_measure
from grader.metrics.policy import Policy, evaluate
from grader.retrieval.pca import reduce
from grader.retrieval.search import rankings_to_run
from grader.runs.ordering import byte_order_ranks

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
    """The EffectMRR of one task at one dimension (against one base encoder, named by ``base``)."""

    task: str
    dimension: int | None
    pca_applied: Mapping[str, bool]
    dimensions: Mapping[str, int]
    mrr_org: float
    mrr_com: float
    base_cosine_range: tuple[float, float]
    base: str | None = None

    @property
    def effect_mrr(self) -> float:
        return self.mrr_com - self.mrr_org

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "base": self.base,
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
    base_label: str | None = None,
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
        base=base_label,
    )


def average_effect(configurations: Sequence[Configuration]) -> float:
    """Mean EffectMRR over all configurations (every (task, base, dimension) counts once)."""
    if not configurations:
        raise UsageError("no (task, dimension) configuration to average")
    return math.fsum(c.effect_mrr for c in configurations) / len(configurations)


def per_task_averages(configurations: Sequence[Configuration]) -> list[dict[str, Any]]:
    """Average_EffectMRR of each task over its base models x dimensions, in first-seen task order."""
    by_task: dict[str, list[Configuration]] = {}
    for configuration in configurations:
        by_task.setdefault(configuration.task, []).append(configuration)
    return [{"task": task, "configurations": len(group), "average_effect_mrr": average_effect(group)} for task, group in by_task.items()]


def base_labels(folders: Sequence[RunFolder]) -> list[str]:
    """One distinct label per base run: its subject's name, suffixed ``#2``, ``#3``... when names repeat."""
    labels: list[str] = []
    for folder in folders:
        name = folder.subject.get("name")
        label = name if isinstance(name, str) and name else folder.folder.name
        candidate, number = label, 1
        while candidate in labels:
            number += 1
            candidate = f"{label}#{number}"
        labels.append(candidate)
    return labels


def _load_bases(base_paths: str | Path | Sequence[str | Path]) -> list[RunFolder]:
    paths = [base_paths] if isinstance(base_paths, (str, Path)) else list(base_paths)
    if not paths:
        raise UsageError("--base: at least one base run folder is needed")
    folders = [RunFolder.load(path, "base") for path in paths]
    seen: dict[Path, Path] = {}
    for folder in folders:
        resolved = folder.folder.resolve()
        if resolved in seen:
            raise UsageError(f"--base: {folder.folder} is given twice (each base model counts once in the average)")
        seen[resolved] = folder.folder
    return folders


def _task_names(benchmark: Benchmark, first_base: RunFolder, tasks: Sequence[str] | None) -> list[str]:
    """The tasks asked for, or else every benchmark task the first base run graded."""
    if tasks:
        return benchmark.select(list(tasks))
    names = [name for name in benchmark.spec.tasks if name in set(first_base.graded_tasks())]
    if not names:
        raise UsageError(f"--base: {first_base.report_path} grades no task of benchmark {benchmark.name!r}")
    return names


def _task_configurations(
    task: Task,
    split: str,
    bases: Sequence[RunFolder],
    labels: Sequence[str],
    augmented: RunFolder,
    dims: Sequence[int | None],
    *,
    weight: float,
    measure: Measure,
    block_elements: int,
) -> list[Configuration]:
    """One task's configurations: each base combined with the augmented run, at each dimension."""
    name = task.name
    data_digest = task.split_digest(split)
    for folder in (*bases, augmented):
        folder.check_task(task, split, data_digest)
    qrels = task.qrels(split)
    query_set = {query.id for query in task.iter_queries() if query.id in qrels}
    doc_set = {document.id for document in task.iter_corpus()}
    # Every input is read and checked before any computation (bases first, as with one base).
    base_runs = [base.embeddings(name) for base in bases]
    augmented_vectors = augmented.embeddings(name)
    for vectors in (*base_runs, augmented_vectors):
        vectors.check_ids(query_set, doc_set)
    configurations: list[Configuration] = []
    for base_vectors, label in zip(base_runs, labels):
        query_ids, doc_ids = base_vectors.query_ids, base_vectors.doc_ids
        base_pair = (base_vectors.queries, base_vectors.corpus)
        augmented_pair = augmented_vectors.aligned_to(query_ids, doc_ids)
        for dimension in dims:
            configurations.append(
                task_configuration(
                    name,
                    qrels,
                    query_ids,
                    doc_ids,
                    base_pair,
                    augmented_pair,
                    weight=weight,
                    dimension=dimension,
                    measure=measure,
                    block_elements=block_elements,
                    base_label=label,
                )
            )
    return configurations


def compute_effect(
    benchmark: Benchmark,
    base_path: str | Path | Sequence[str | Path],
    augmented_path: str | Path,
    weight: float,
    *,
    split: str | None = None,
    tasks: Sequence[str] | None = None,
    dimensions: Sequence[int] = (),
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
) -> dict[str, Any]:
    """The EffectMRR result (a JSON-ready dict) of base and augmented ``grader run --keep-embeddings`` folders.

    ``base_path`` is one folder or a sequence of them (one per base model); every base
    is combined with the same augmented run, at every dimension, on every task.
    """
    weight = check_weight(weight)
    split = split or benchmark.spec.default_split
    measure = effect_measure(benchmark.spec)
    bases = _load_bases(base_path)
    labels = base_labels(bases)
    augmented = RunFolder.load(augmented_path, "augmented")
    for folder in (*bases, augmented):
        folder.check_benchmark(benchmark)
    dims: list[int | None] = list(dimensions) if dimensions else [None]
    configurations: list[Configuration] = []
    for name in _task_names(benchmark, bases[0], tasks):
        configurations.extend(
            _task_configurations(
                benchmark.task(name), split, bases, labels, augmented, dims, weight=weight, measure=measure, block_elements=block_elements
            )
        )
    tasks_summary = per_task_averages(configurations)
    result: dict[str, Any] = {
        "kind": "effect",
        "grader": {"name": "grader", "version": grader.__version__},
        "weight": weight,
        "benchmark": benchmark.name,
        "split": split,
        "measure": str(measure),
        "policy": Policy.STRICT.value,
        "bases": [
            {"label": label, "report": str(folder.report_path), "subject": folder.subject, "labels": folder.labels}
            for folder, label in zip(bases, labels)
        ],
        "augmented": {"report": str(augmented.report_path), "subject": augmented.subject},
        "dimensions": list(dims),
        "configurations": [c.as_dict() for c in configurations],
        "tasks": tasks_summary,
        # Every task has len(bases) x len(dims) configurations, so the mean of the task
        # averages equals the mean over every configuration; computed as the former.
        "average_effect_mrr": math.fsum(t["average_effect_mrr"] for t in tasks_summary) / len(tasks_summary),
        "labels": {"augmented": augmented.labels},
    }
    return result


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


def _percent(value: float, width: int, signed: bool = False) -> str:
    return f"{100.0 * value:>+{width}.2f}" if signed else f"{100.0 * value:>{width}.2f}"


def format_effect_table(result: Mapping[str, Any]) -> str:
    """A readable table in percent: one line per (task, base, dimension), each task's average, the overall mean."""
    measure = result["measure"]
    configurations = result["configurations"]
    bases = result["bases"]
    width = max([len("task")] + [len(c["task"]) for c in configurations])
    base_width = max([len("base")] + [len(str(c.get("base"))) for c in configurations])
    lines = [
        f"EffectMRR on {result['benchmark']} ({result['split']}), W = {result['weight']:g}, {measure}; values in percent",
        f"augmented: {result['augmented']['subject'].get('name', '?')} ({result['augmented']['report']})",
    ]
    for base in bases:
        lines.append(f"base:      {base['label']} ({base['report']})")
    header = f"{'task':<{width}}  {'base':<{base_width}}  {'dimension':>9}  {'PCA b/a':>7}  {'MRR_org':>8}  {'MRR_com':>8}  {'EffectMRR':>9}"
    lines += [header, "-" * len(header)]
    for c in configurations:
        dimension = "native" if c["dimension"] is None else str(c["dimension"])
        pca = "/".join("y" if c["pca_applied"][side] else "n" for side in ("base", "augmented"))
        lines.append(
            f"{c['task']:<{width}}  {c.get('base')!s:<{base_width}}  {dimension:>9}  {pca:>7}  "
            f"{_percent(c['mrr_org'], 8)}  {_percent(c['mrr_com'], 8)}  {_percent(c['effect_mrr'], 9, True)}"
        )
    n_dims = len(result.get("dimensions") or [None])
    lines.append("")
    lines.append(f"Average_EffectMRR per task, over {len(bases)} base model(s) x {n_dims} dimension(s):")
    for entry in result["tasks"]:
        lines.append(f"  {entry['task']:<{width}}  {_percent(entry['average_effect_mrr'], 9, True)}  ({entry['configurations']} configuration(s))")
    lines.append(
        f"Average_EffectMRR over {len(result['tasks'])} task(s) = {100.0 * result['average_effect_mrr']:+.2f} "
        f"(mean of the task averages; {len(configurations)} configuration(s))"
    )
    return "\n".join(lines) + "\n"
