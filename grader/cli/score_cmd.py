"""``grader score``: score a run file against judgements."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from grader.cli.options import dedup_aware_option
from grader.data.qrels import read_qrels
from grader.errors import UsageError
from grader.files import atomic_write_text, sha256_file
from grader.metrics.measures import parse_measures
from grader.metrics.output import as_coir, as_json, as_table, dumps, per_query_tsv
from grader.metrics.per_query import RELEVANCE_LEVEL
from grader.metrics.policy import Policy, evaluate
from grader.runs.readers import RunFormat, read_run


@click.command("score")
@click.option(
    "--qrels",
    "qrels_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Judgements: BEIR TSV, TREC qrels ('#' lines are comments, as in trec_eval) or JSON. See docs/inputs.md.",
)
@click.option(
    "--run",
    "run_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Run: TREC (qid Q0 docid rank score tag; later fields ignored and '#' lines comments, as in trec_eval), "
    "JSON {qid: {docid: score}} or JSONL.",
)
@click.option("--run-format", type=click.Choice([f.value for f in RunFormat]), default=None, help="Run format (default: detected).")
@click.option(
    "--measure",
    "measures",
    multiple=True,
    metavar="M",
    help="Measure such as NDCG@10 (repeatable, or comma-separated): NDCG, MAP, Recall, P, MRR, Success, Rprec, bpref at any k. "
    "Default: NDCG, MAP, Recall, P, MRR at 1,3,5,10,100,1000.",
)
@click.option(
    "--policy",
    type=click.Choice([p.value for p in Policy]),
    default=Policy.STRICT.value,
    show_default=True,
    help="strict: every judged query counts, missing ones score 0. coir: reproduce coir-eval/BEIR exactly.",
)
@click.option(
    "--relevance-level",
    type=click.IntRange(min=1),
    default=RELEVANCE_LEVEL,
    show_default=True,
    help="Least judgement counted as relevant (trec_eval's -l) by every measure but NDCG, whose gains are the judgements. strict only; no --out.",
)
@click.option("--per-query", "per_query_path", type=click.Path(path_type=Path), default=None, help="Also write per-query values (TSV) to this file.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "coir"]),
    default="table",
    show_default=True,
    help="coir: CoIR's result shape, rounded to 5 decimals.",
)
@click.option(
    "--out",
    "report_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a grading report here (signed envelope with --sign, plain report otherwise).",
)
@click.option(
    "--sign",
    "key_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Ed25519 private key (from `grader keygen`) to sign the report with; needs --out.",
)
@click.option(
    "--cross-check",
    is_flag=True,
    help="Also score the run with pytrec_eval and the coir policy, on the measures pytrec_eval has; exit 1 if any value differs by more than 1e-12.",
)
@dedup_aware_option(
    "Also print, beside the official numbers, the dedup-aware ones: a retrieved duplicate of a relevant document "
    "(by the clusters of this `grader lint` report) counts as that document (docs/lint.md). The report file (--out) is unchanged."
)
@click.option(
    "--dedup-task", default=None, metavar="TASK", help="The lint report's task whose clusters --dedup-aware uses (needed when it has several)."
)
def score_command(
    qrels_path: Path,
    run_path: Path,
    run_format: str | None,
    measures: tuple[str, ...],
    policy: str,
    relevance_level: int,
    per_query_path: Path | None,
    output_format: str,
    report_path: Path | None,
    key_path: Path | None,
    cross_check: bool,
    dedup_report_path: Path | None,
    dedup_task: str | None,
) -> None:
    """Score a run file against judgements with trec_eval's semantics."""
    if key_path is not None and report_path is None:
        raise UsageError("--sign needs --out REPORT")
    if dedup_report_path is not None and (output_format == "coir" or relevance_level != RELEVANCE_LEVEL):
        raise UsageError("--dedup-aware needs --format table or json and relevance level 1")
    if dedup_task is not None and dedup_report_path is None:
        raise UsageError("--dedup-task needs --dedup-aware LINT.json")
    if relevance_level != RELEVANCE_LEVEL and (report_path is not None or policy != Policy.STRICT.value):
        # A report and coir-eval's numbers are at level 1; a report saying nothing of another level would mislead.
        raise UsageError(
            f"--relevance-level {relevance_level} needs --policy strict and no --out", hint="reports and the coir policy grade at level 1"
        )
    started_at = datetime.now(UTC)
    parsed_measures = parse_measures(list(measures))
    qrels = read_qrels(qrels_path)
    fmt = RunFormat(run_format) if run_format else None
    if cross_check or dedup_report_path is not None or report_path is not None:
        # Each looks at the whole run again (a report carries each task's run digest): read it whole.
        run = read_run(run_path, fmt)
        evaluation = evaluate(qrels, run, parsed_measures, Policy(policy), relevance_level=relevance_level)
    else:
        from grader.metrics.streamed import score_run_file

        evaluation = score_run_file(qrels, run_path, fmt, parsed_measures, Policy(policy), relevance_level=relevance_level)
    if cross_check:
        # Before anything is written: a disagreement exits 1 having written nothing.
        from grader.metrics.cross_check import STRICT_NOTE
        from grader.metrics.cross_check import cross_check as check_against_pytrec

        click.echo(check_against_pytrec(qrels, run, parsed_measures, relevance_level=relevance_level).summary(), err=True)
        click.echo(f"note: {STRICT_NOTE}", err=True)
    if per_query_path is not None:
        atomic_write_text(per_query_path, per_query_tsv(evaluation))
    if report_path is not None:
        from grader.reports.score_report import write_score_report

        write_score_report(
            evaluation,
            run=run,
            qrels_path=qrels_path,
            run_digest=sha256_file(run_path),
            run_name=run_path.name,
            started_at=started_at,
            report_path=report_path,
            key_path=key_path,
        )
    dedup = None
    if dedup_report_path is not None:
        from grader.integrity.dedup_measures import evaluate_dedup_aware, load_clusters

        task_name, clusters = load_clusters(dedup_report_path, dedup_task)
        dedup = evaluate_dedup_aware(qrels, run, parsed_measures, Policy(policy), clusters)
    if output_format == "json":
        data = as_json(evaluation)
        if dedup is not None:
            data["dedup_aware"] = {"task": task_name, "clusters": len(clusters), "measures": dedup.means()}
        click.echo(dumps(data), nl=False)
    elif output_format == "coir":
        click.echo(dumps(as_coir(evaluation)), nl=False)
    else:
        click.echo(as_table(evaluation), nl=False)
        if dedup is not None:
            click.echo(f"\ndedup-aware (docs/lint.md; {len(clusters)} duplicate clusters of task {task_name!r}; not the official numbers):")
            click.echo(as_table(dedup).split("\npolicy ", 1)[0])


def register(group: click.Group) -> None:
    """Add ``score`` to ``group``."""
    group.add_command(score_command)
