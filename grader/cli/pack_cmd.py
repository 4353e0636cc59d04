"""``grader pack``: a sentence-transformers (or transformers) folder -> an ONNX submission ``grader check`` accepts."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader.errors import UsageError
from grader.pack.build import MIN_COSINE, pack_model
from grader.pack.config import POOLINGS, Overrides, read_settings
from grader.submissions.manifest import Training

SETTINGS = ("zero-shot", "fine-tuned")
MEANING = (
    "zero-shot: trained on none of the benchmark's training splits and on no data derived from the benchmark's sources; "
    "fine-tuned: trained on some of either"
)
TRAINING_HINT = (
    "grader pack MODEL --out DIR --training-setting zero-shot, or --training-setting fine-tuned --training-dataset NAME "
    "(repeatable); docs/pack.md says which applies"
)


@click.command("pack")
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Submission folder to create (must not exist).")
@click.option("--max-length", type=int, default=None, help="Tokens per text (default: the model's max_seq_length).")
@click.option("--query-prefix", default=None, help="Text put before every query (default: the model's configured query prompt).")
@click.option("--document-prefix", default=None, help="Text put before every document (default: the model's configured document prompt).")
@click.option(
    "--pooling", type=click.Choice(POOLINGS), default=None, help="Pooling; required for a plain transformers folder (default: the Pooling module's)."
)
@click.option("--normalize/--no-normalize", default=None, help="L2-normalise embeddings (default: whether the model has a Normalize module).")
@click.option("--name", default=None, help="Submission name (default: the model's own name, from its README model card or config).")
@click.option(
    "--training-setting",
    type=click.Choice(SETTINGS),
    default=None,
    help="How the model was trained with respect to the benchmark (asked on a terminal when not given). " + MEANING + ".",
)
@click.option(
    "--training-dataset",
    "training_datasets",
    multiple=True,
    metavar="NAME",
    help="A dataset the model was trained or fine-tuned on (repeatable; at least one with fine-tuned).",
)
@click.option("--threads", type=click.IntRange(1, 256), default=1, show_default=True, help="Threads for the packed encoder during the check.")
def pack_command(
    model_dir: Path,
    out_dir: Path,
    max_length: int | None,
    query_prefix: str | None,
    document_prefix: str | None,
    pooling: str | None,
    normalize: bool | None,
    name: str | None,
    training_setting: str | None,
    training_datasets: tuple[str, ...],
    threads: int,
) -> None:
    """Export MODEL_DIR to ONNX with its tokenizer and a submission.json read from its own configuration.

    The submission is written only if the packed encoder's embeddings of a sample of
    texts have cosine >= 0.9999 with the original model's. Its manifest declares the
    training setting and datasets (asked on a terminal when not given) and a model card
    (base model, parameters, dimension, max length, pooling, licence: what the folder says).
    """
    if out_dir.exists() or out_dir.is_symlink():
        raise UsageError(f"{out_dir} already exists; choose a new --out folder")
    overrides = Overrides(max_length=max_length, query_prefix=query_prefix, document_prefix=document_prefix, pooling=pooling, normalize=normalize)
    read_settings(model_dir, overrides)  # a folder it cannot pack is refused before any question is asked
    training = ask_training(training_setting, training_datasets, interactive=sys.stdin.isatty())
    result = pack_model(
        model_dir,
        out_dir,
        overrides=overrides,
        name=name,
        training=training,
        threads=threads,
        say=lambda line: click.echo(f"pack: {line}", err=True),
    )
    click.echo(
        f"packed {model_dir} -> {result.out} (dimension {result.dimension}; smallest cosine to the original "
        f"{result.min_cosine:.10f} >= {MIN_COSINE} over {result.texts} texts)"
    )
    click.echo(f"next: grader check {result.out}")


def ask_training(setting: str | None, datasets: tuple[str, ...], *, interactive: bool) -> Training:
    """The declared training labels: the options, else asked on a terminal; refused (exit 2) without a terminal."""
    if setting is None:
        if not interactive:
            raise UsageError("say how the model was trained: --training-setting zero-shot or fine-tuned (no terminal to ask on)", hint=TRAINING_HINT)
        click.echo(f"How was the model trained? {MEANING}.", err=True)
        setting = click.prompt("Training setting", type=click.Choice(SETTINGS), err=True)
        while not datasets:
            answer = click.prompt(
                "Training datasets, comma-separated" + (" (at least one)" if setting == "fine-tuned" else " (empty: none declared)"),
                default="",
                show_default=False,
                err=True,
            )
            datasets = tuple(part for part in answer.split(",") if part.strip())
            if setting == "zero-shot":
                break
    cleaned: list[str] = []
    for dataset in datasets:
        dataset = " ".join(dataset.split())
        if dataset and dataset not in cleaned:
            cleaned.append(dataset)
    if setting == "fine-tuned" and not cleaned:
        raise UsageError(
            "--training-setting fine-tuned needs at least one --training-dataset NAME (what the model was fine-tuned on)", hint=TRAINING_HINT
        )
    return Training("fine-tuned" if setting == "fine-tuned" else "zero-shot", tuple(cleaned))


def register(group: click.Group) -> None:
    """Add ``pack`` to ``group``."""
    group.add_command(pack_command)
