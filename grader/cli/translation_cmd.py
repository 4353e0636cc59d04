"""``grader score-translation``: CrystalBLEU-4 and METEOR of predicted translations."""

from __future__ import annotations

from pathlib import Path

import click

from grader.metrics.output import dumps


@click.command("score-translation")
@click.option(
    "--references",
    "references_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help='JSONL: {"query_id": ..., "reference": ...} per line.',
)
@click.option(
    "--predictions",
    "predictions_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help='JSONL: {"query_id": ..., "prediction": ...} per line (translate mode\'s predictions.jsonl).',
)
@click.option(
    "--train-targets",
    "train_targets",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Training targets, one per line (or .jsonl with a reference field): CrystalBLEU ignores their most common 1-4-grams. Without it, plain BLEU-4 is reported.",
)
@click.option(
    "--ignore-top",
    "k",
    type=click.IntRange(min=0),
    default=500,
    show_default=True,
    help="How many of the most common training n-grams CrystalBLEU ignores.",
)
@click.option(
    "--nltk-data",
    "nltk_data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data root holding corpora/wordnet (default: $GRADER_NLTK_DATA or ~/.cache/grader/nltk_data; build it with scripts/setup-wordnet.sh).",
)
@click.option(
    "--per-query",
    "per_query_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write per-query scores (TSV) to this file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (means, counts, recipe and per-query scores).")
def score_translation_command(
    references_path: Path,
    predictions_path: Path,
    train_targets: Path | None,
    k: int,
    nltk_data: Path | None,
    per_query_path: Path | None,
    as_json: bool,
) -> None:
    """Score predicted translations with sentence CrystalBLEU-4 and METEOR (means over all references).

    Tokens are whitespace-separated. A reference without a prediction scores 0
    and is counted as missing; a prediction for an unknown query id is an error.
    METEOR uses WordNet 3.0 read offline (never downloaded).
    """
    from grader.files import atomic_write_text
    from grader.translation.scoring import score_files

    scores = score_files(references_path, predictions_path, train_targets=train_targets, k=k, nltk_data=nltk_data)
    if per_query_path is not None:
        rows = [f"query_id\t{scores.bleu_measure}\tMETEOR\tmissing\n"]
        rows += [f"{s.query_id}\t{s.bleu!r}\t{s.meteor!r}\t{int(s.missing)}\n" for s in scores.per_query]
        atomic_write_text(per_query_path, "".join(rows))
    if as_json:
        click.echo(dumps(scores.as_json()), nl=False)
        return
    width = max(len(scores.bleu_measure), len("METEOR"))
    click.echo(f"{scores.bleu_measure:<{width}}  {scores.mean_bleu:.4f}")
    click.echo(f"{'METEOR':<{width}}  {scores.mean_meteor:.4f}")
    click.echo(f"{scores.count} references, {scores.count - scores.missing} predicted, {scores.missing} missing (scored 0)")
    if scores.ignored is None:
        click.echo("no n-grams ignored (no --train-targets): plain sentence BLEU-4, not CrystalBLEU")
    else:
        click.echo(
            f"ignored: the {len(scores.ignored.ngrams)} most common 1-4-grams of {scores.ignored.targets} training targets ({scores.ignored.source})"
        )


def register(group: click.Group) -> None:
    """Add ``score-translation`` to ``group``."""
    group.add_command(score_translation_command)
