"""EffectMRR (CAT, Phan et al. 2023, Formula 6): how much an augmented encoder adds to a base one.

``grader effect`` reads two ``grader run --keep-embeddings`` folders; see
``docs/effect.md`` for the formula and the choices made.
"""

from grader.effect.combine import combine_rankings, global_min_max, min_max_scale, top_k_trec
from grader.effect.compute import (
    Configuration,
    average_effect,
    compute_effect,
    effect_json,
    effect_measure,
    format_effect_table,
    task_configuration,
    write_effect,
)
from grader.effect.inputs import RunFolder, TaskEmbeddings

__all__ = [
    "Configuration",
    "RunFolder",
    "TaskEmbeddings",
    "average_effect",
    "combine_rankings",
    "compute_effect",
    "effect_json",
    "effect_measure",
    "format_effect_table",
    "global_min_max",
    "min_max_scale",
    "task_configuration",
    "top_k_trec",
    "write_effect",
]
