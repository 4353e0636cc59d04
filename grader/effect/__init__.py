"""EffectMRR (CAT, Phan et al. 2023, Formula 6): how much an augmented encoder adds to a base one.

``grader effect`` reads ``grader run --keep-embeddings`` folders (one or more base runs, one augmented run); see
``docs/effect.md`` for the formula and the choices made.
"""

from grader.effect.combine import combine_rankings, global_min_max, min_max_scale, top_k_trec
from grader.effect.compute import (
    Configuration,
    average_effect,
    base_labels,
    compute_effect,
    effect_json,
    effect_measure,
    format_effect_table,
    per_task_averages,
    task_configuration,
    write_effect,
)
from grader.effect.inputs import RunFolder, TaskEmbeddings

__all__ = [
    "Configuration",
    "RunFolder",
    "TaskEmbeddings",
    "average_effect",
    "base_labels",
    "combine_rankings",
    "compute_effect",
    "effect_json",
    "effect_measure",
    "format_effect_table",
    "global_min_max",
    "min_max_scale",
    "per_task_averages",
    "task_configuration",
    "top_k_trec",
    "write_effect",
]
