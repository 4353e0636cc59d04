"""``grader verify``: check a signed report and show what it verifiably says."""

from __future__ import annotations

import click

from grader.reports.keys import load_public_key
from grader.reports.model import report_json
from grader.reports.summary import format_summary
from grader.reports.verify import verify_report_file


@click.command("verify")
# Plain strings, not click.Path(exists=True): an unreadable report is a
# verification failure (exit 1, one line), not a usage error.
@click.argument("report")
@click.option("--key", "key_path", required=True, help="Public key (grader.pub) the report must be signed with.")
@click.option("--json", "as_json", is_flag=True, help="Print the verified report as JSON instead of a summary.")
def verify(report: str, key_path: str, as_json: bool) -> None:
    """Verify the signed report REPORT (a DSSE envelope); exit 1 if any check fails.

    Nothing is printed on stdout unless every check passed.
    """
    public_key = load_public_key(key_path)
    verified = verify_report_file(report, public_key)
    if as_json:
        click.echo(report_json(verified.report).decode("utf-8"), nl=False)
    else:
        click.echo(format_summary(verified))


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(verify)
