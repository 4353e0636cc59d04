"""``grader submit``, ``grader status``, ``grader submissions``: the participant's side of a hosted competition.

Exit status of ``submit --wait`` and ``status --wait``: 0 scored, 1 failed (the
submission's fault), 3 error or cancelled (the platform's or the host's);
4 refused (quota, window, invalid upload), 5 server unreachable or other answer.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from grader import jsonio
from grader.cli.exits import EXIT_SUBMISSION, REMOTE_STATE_EXIT
from grader.hosting import settings
from grader.hosting.client import HostingClient, token_from


def _server_option(func):  # type: ignore[no-untyped-def]
    func = click.option("--token", default=None, help=f"Your token (default: ${settings.TOKEN}).")(func)
    return click.option("--server", required=True, envvar=settings.SERVER, help="The competition server's URL.")(func)


def _line(view: dict[str, Any]) -> str:
    parts = [view["id"], view["state"]]
    if view.get("failure_code"):
        parts.append(view["failure_code"])
    if view.get("score") is not None:
        parts.append(f"score {view['score']:.4f}")
    if view.get("last_log_line"):
        parts.append(f"last log line: {click.unstyle(view['last_log_line'])!r}")
    return "  ".join(parts)


def _progress(sent: int, total: int) -> None:
    width = 30
    done = int(width * sent / total) if total else width
    sys.stderr.write(f"\rupload [{'#' * done}{'.' * (width - done)}] {sent / 1e6:.1f}/{total / 1e6:.1f} MB")
    if sent >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _finish(client: HostingClient, submission_id: str) -> None:
    view = client.wait(submission_id, on_change=lambda v: click.echo(_line(v), err=True))
    click.echo(_line(view))
    click.get_current_context().exit(REMOTE_STATE_EXIT.get(view["state"], EXIT_SUBMISSION))


@click.command("submit")
@click.argument("submission", type=click.Path(path_type=Path))
@_server_option
@click.option("--wait", is_flag=True, help="Follow the grading; exit 0 scored, 1 failed, 3 error/cancelled.")
@click.option("--sample", is_flag=True, help="Run on the public sample split instead: logs visible, separate quota.")
def submit(submission: Path, server: str, token: str | None, wait: bool, sample: bool) -> None:
    """Check SUBMISSION locally, pack it (a Docker image via docker save), upload it, print its id."""
    client = HostingClient(server, token_from(token))
    view = client.submit(submission, sample=sample, progress=_progress)
    click.echo(view["id"])
    if wait:
        _finish(client, view["id"])


@click.command("status")
@click.argument("submission_id")
@_server_option
@click.option("--wait", is_flag=True, help="Follow until it ends.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), default=None, help="Also save the signed report (when available to you).")
@click.option("--logs", is_flag=True, help="Print the container logs (sample-split runs only).")
@click.option("--json", "as_json", is_flag=True)
def status(submission_id: str, server: str, token: str | None, wait: bool, report_path: Path | None, logs: bool, as_json: bool) -> None:
    """Show one of your submissions."""
    client = HostingClient(server, token_from(token))
    if report_path is not None:
        from grader.files import atomic_write_bytes

        atomic_write_bytes(report_path, client.report(submission_id))
    if logs:
        for name, text in client.logs(submission_id).items():
            click.echo(f"--- {name}\n{click.unstyle(text)}")
    if wait:
        _finish(client, submission_id)
    view = client.status(submission_id)
    click.echo(jsonio.dumps(view, indent=2, ensure_ascii=True) if as_json else _line(view))


@click.command("submissions")
@_server_option
@click.option("--json", "as_json", is_flag=True)
def submissions(server: str, token: str | None, as_json: bool) -> None:
    """List your submissions, newest first."""
    views = HostingClient(server, token_from(token)).submissions()
    if as_json:
        click.echo(jsonio.dumps(views, indent=2, ensure_ascii=True))
        return
    for view in views:
        click.echo(f"{_line(view)}  {view['track']}  {view['uploaded_at']}  {click.unstyle(view['name'])!r}")


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    for command in (submit, status, submissions):
        group.add_command(command)
