"""``grader effect``: EffectMRR of an augmented encoder over one or more base ones (CAT, Formula 6)."""

from __future__ import annotations

from pathlib import Path

import click

from grader.cli.options import tasks_option
from grader.data.registry import resolve_benchmark
from grader.effect.compute import compute_effect, effect_json, format_effect_table, write_effect
from grader.retrieval.pca import parse_dimensions


@click.command("effect")
@click.option(
    "--base",
    "base_dirs",
    required=True,
    multiple=True,
    type=click.Path(path_type=Path),
    help="`grader run --keep-embeddings` folder of a base (original) encoder; repeat for several base models (CAT: GraphCodeBERT, UniXcoder).",
)
@click.option(
    "--augmented",
    "augmented_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="`grader run --keep-embeddings` folder of the augmented encoder.",
)
@click.option("--weight", type=float, required=True, help="W in [0, 1]: S = (1 - W) * minmax(cos_base) + W * cos_augmented.")
@click.option("--benchmark", "benchmark_name", required=True, help="A registered benchmark (mini, coir, cat) or a benchmark folder.")
@click.option(
    "--pca-dims",
    default=None,
    metavar="D1,D2",
    help="Dimensions to reduce each side to by PCA (CAT: 20,768); each is a separate configuration. Default: native.",
)
@tasks_option("Comma-separated task names (default: every benchmark task the base run graded).")
@click.option("--split", default=None, help="Split (default: the benchmark's, usually test).")
@click.option("--out", "out_path", type=click.Path(path_type=Path), default=None, help="Write the JSON result here (atomically).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON result instead of a table.")
def effect_command(
    base_dirs: tuple[Path, ...],
    augmented_dir: Path,
    weight: float,
    benchmark_name: str,
    pca_dims: str | None,
    tasks: list[str] | None,
    split: str | None,
    out_path: Path | None,
    as_json: bool,
) -> None:
    """EffectMRR = MRR(combined) - MRR(base) per (task, base, dimension); Average_EffectMRR per task and overall."""
    dimensions = parse_dimensions(pca_dims)
    benchmark = resolve_benchmark(benchmark_name)
    result = compute_effect(benchmark, list(base_dirs), augmented_dir, weight, split=split, tasks=tasks, dimensions=dimensions)
    if out_path is not None:
        write_effect(result, out_path)
    if as_json:
        click.echo(effect_json(result), nl=False)
    else:
        click.echo(format_effect_table(result), nl=False)
        if out_path is not None:
            click.echo(f"result: {out_path}")


def register(group: click.Group) -> None:
    """Add ``effect`` to ``group``."""
    group.add_command(effect_command)
