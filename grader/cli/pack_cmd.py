"""``grader pack``: a sentence-transformers (or transformers) folder -> an ONNX submission ``grader check`` accepts."""

from __future__ import annotations

from pathlib import Path

import click

from grader.pack.build import MIN_COSINE, pack_model
from grader.pack.config import POOLINGS, Overrides


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
@click.option("--name", default=None, help="Submission name (default: the model folder's name).")
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
    threads: int,
) -> None:
    """Export MODEL_DIR to ONNX with its tokenizer and a submission.json read from its own configuration.

    The submission is written only if the packed encoder's embeddings of a sample of
    texts have cosine >= 0.9999 with the original model's.
    """
    overrides = Overrides(max_length=max_length, query_prefix=query_prefix, document_prefix=document_prefix, pooling=pooling, normalize=normalize)
    result = pack_model(model_dir, out_dir, overrides=overrides, name=name, threads=threads, say=lambda line: click.echo(f"pack: {line}", err=True))
    click.echo(
        f"packed {model_dir} -> {result.out} (dimension {result.dimension}; smallest cosine to the original "
        f"{result.min_cosine:.10f} >= {MIN_COSINE} over {result.texts} texts)"
    )
    click.echo(f"next: grader check {result.out}")


def register(group: click.Group) -> None:
    """Add ``pack`` to ``group``."""
    group.add_command(pack_command)
