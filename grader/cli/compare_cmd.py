"""``grader compare``: significance, intervals and ranks over signed reports of the same benchmark."""

from __future__ import annotations

from typing import Any

import click

from grader import jsonio
from grader.reports.keys import load_public_key
from grader.reports.verify import verify_report_file
from grader.stats.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from grader.stats.compare import DEFAULT_ALPHA, DEFAULT_LEVEL, Comparison, compare
from grader.stats.reports import cost_column, refuse_mixed_settings, table_from_reports, training_setting
from grader.text import escape_control


def _p(value: float) -> str:
    return f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"


def _optional(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _cost_cell(cost: dict[str, Any] | None) -> str:
    """CPU seconds per 1,000 queries; ``*`` marks a hosted worker's word; ``n/a`` where the report has no figure."""
    figure = None if cost is None else cost.get("cpu_s_per_1000_queries")
    if figure is None:
        return "n/a"
    return f"{figure:.2f}" + ("*" if cost is not None and cost.get("source") == "worker" else "")


def format_comparison(comparison: Comparison, header: str, costs: dict[str, dict[str, Any] | None] | None = None) -> str:
    """The text ``grader compare`` prints: the ranked entries (with ``costs``, by entry name, a cost column), then every pair."""
    percent = f"{comparison.level * 100:g}%"
    costs = costs or {}
    lines = [
        header,
        f"bootstrap: {comparison.resamples:,} resamples of the queries within each task, seed {comparison.seed}; "
        f"{percent} percentile intervals; groups: Holm-adjusted randomization p >= {comparison.alpha:g} vs the group's leader",
        "",
        f"{'rank':>4}  {'group':>5}  {'score':>6}  {percent + ' CI':<16}  {'rank interval':<13}  {'CPU s/1k q':>10}  entry",
    ]
    for entry in comparison.entries:
        interval = f"[{entry.ci_low:.4f}, {entry.ci_high:.4f}]"
        ranks = f"{entry.rank_low}-{entry.rank_high}"
        cost = _cost_cell(costs.get(entry.name))
        lines.append(f"{entry.rank:>4}  {entry.group:>5}  {entry.score:.4f}  {interval:<16}  {ranks:<13}  {cost:>10}  {entry.name}")
    if any(cell.endswith("*") for cell in map(_cost_cell, costs.values())):
        lines.append("* a hosted worker's word (docs/reports.md, The cost block); CPU s/1k q varies between re-grades, never in the statistics")
    if comparison.pairs:
        test = "exact randomization" if comparison.randomization_exact else "randomization"
        lines += [
            "",
            f"pairwise ({len(comparison.pairs)} comparison{'s' if len(comparison.pairs) != 1 else ''}, Holm's correction over all of them; "
            f"{test} test and paired t-test; d_z = Cohen's standardized difference):",
            f"{'difference':>10}  {'d_z':>7}  {'rand p':>8}  {'(Holm)':>8}  {'t p':>8}  {'(Holm)':>8}  pair",
        ]
        for pair in comparison.pairs:
            lines.append(
                f"{pair.mean_difference:>+10.4f}  {_optional(pair.effect_size, '>7.3f'):>7}  {_p(pair.randomization_p):>8}  "
                f"{_p(pair.randomization_p_holm):>8}  {_p(pair.t_p):>8}  {_p(pair.t_p_holm):>8}  {pair.first} vs {pair.second}"
            )
    return "\n".join(lines)


@click.command("compare")
@click.argument("reports", nargs=-1, required=True)
@click.option("--key", "key_path", required=True, help="Public key (grader.pub) every report must be signed with.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--seed", type=click.IntRange(0, 2**64 - 1), default=DEFAULT_SEED, show_default=True, help="Seed of the random draws (docs/statistics.md)."
)
@click.option(
    "--resamples",
    type=click.IntRange(39, 1_000_000),
    default=DEFAULT_RESAMPLES,
    show_default=True,
    help="Bootstrap resamples and randomization-test sign flips.",
)
@click.option("--level", type=click.FloatRange(0.5, 0.999), default=DEFAULT_LEVEL, show_default=True, help="Confidence level of the intervals.")
@click.option("--alpha", type=click.FloatRange(0.0001, 0.5), default=DEFAULT_ALPHA, show_default=True, help="Significance level of the groups.")
@click.option(
    "--mixed-settings",
    is_flag=True,
    help="Rank reports of different training settings (zero-shot, fine-tuned, undeclared) together; the boards never do.",
)
def compare_command(
    reports: tuple[str, ...], key_path: str, as_json: bool, seed: int, resamples: int, level: float, alpha: float, mixed_settings: bool
) -> None:
    """Compare signed reports REPORT... of the same benchmark over the same queries.

    Each report's signature is verified first. Prints each entry's score with a
    bootstrap confidence interval, rank interval and significance group, and for
    every pair the randomization and paired t-tests (Holm-corrected) with effect sizes.
    Reports of different training settings are refused (exit 2), as the boards rank
    them apart, unless --mixed-settings. Public-part reports (a competition server's,
    before the end) carry no per-query values and do not compare; full ones do.
    """
    public_key = load_public_key(key_path)
    verified = [verify_report_file(path, public_key) for path in reports]
    documents = [item.report for item in verified]
    table = table_from_reports(list(reports), documents)  # different benchmarks, data or queries: refused first
    if not mixed_settings:
        refuse_mixed_settings(list(reports), documents)
    result = compare(table, resamples=resamples, seed=seed, level=level, alpha=alpha)  # UsageError: e.g. too few resamples for the level
    first = documents[0]
    benchmark = first["benchmark"]
    if as_json:
        data: dict[str, Any] = {
            "benchmark": {"name": benchmark["name"], "version": benchmark["version"], "policy": first["policy"]},
            "reports": [
                {
                    "path": path,
                    "subject": item.report["subject"]["name"],
                    "digest": item.report["subject"]["digest"]["sha256"],
                    "keyid": item.keyid,
                    "training_setting": training_setting(item.report),
                    "cost": cost_column(item.report),
                }
                for path, item in zip(reports, verified)
            ],
            **result.as_json(),
        }
        click.echo(jsonio.dumps(data, indent=2, ensure_ascii=True))
        return
    header = (
        f"benchmark {escape_control(benchmark['name'])} {escape_control(benchmark['version'])}, {result.measure} ({first['policy']} policy), "
        f"{len(result.tasks)} task{'s' if len(result.tasks) != 1 else ''}, {result.queries:,} queries; every report verified; "
        + (
            "training settings mixed (--mixed-settings)"
            if len({training_setting(d) for d in documents}) > 1
            else f"training setting {training_setting(first)}"
        )
    )
    click.echo(format_comparison(result, header, dict(zip(table.names, map(cost_column, documents)))))


def register(group: click.Group) -> None:
    """Add ``compare`` to ``group``."""
    group.add_command(compare_command)
