"""``grader submit``, ``status``, ``submissions``, ``quota``, ``finals``: the participant's side of a hosted competition.

Exit status of ``submit --wait`` and ``status --wait``: 0 scored, 1 failed (the
submission's fault), 3 error or cancelled (the platform's or the host's);
4 refused (quota, window, kind, training labels, size, invalid upload: by the
server, or by ``submit`` itself before uploading, in the server's words),
5 server unreachable or other answer, 6 unknown id (grader/cli/exits.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import click

from grader import jsonio
from grader.cli.exits import EXIT_SUBMISSION, REMOTE_STATE_EXIT
from grader.cli.watch import WatchLine
from grader.errors import UsageError
from grader.hosting import environment
from grader.hosting.clock import iso
from grader.hosting.errors import ClientError
from grader.hosting.intake.refusals import QuotaStatus
from grader.hosting.participant.client import TERMINAL, HostingClient, queue_of, token_from
from grader.hosting.participant.fetch import FetchLimits
from grader.hosting.protocol.progress import queue_words, task_words
from grader.text import MAX_STDERR_LINE, escape_control, escape_lines, quote_id

#: Scores a view may carry, with the label printed before each (docs/leaderboard.md: participants see
#: the public part's score until the end, then also the private part's and the full split's).
SCORE_LABELS = (("score", "public"), ("private_score", "private"), ("full_score", "full"))
#: ``--wait`` looks after this many seconds, then half as long again each time the state is unchanged, up to
#: :data:`MAX_LOOK_S` (issue 38: a look costs the server about 4.5 ms of CPU; 100 participants waiting through a
#: queue at a look every 0.5 s kept nearly a whole CPU busy, at one every 2 s a quarter of one).
FIRST_LOOK_S = 0.5
MAX_LOOK_S = 2.0


def _server_option(func):  # type: ignore[no-untyped-def]
    func = click.option("--token", default=None, help=f"Your token (default: ${environment.TOKEN}).")(func)
    return click.option("--server", required=True, envvar=environment.SERVER, help="The competition server's URL.")(func)


def _scores(view: dict[str, Any]) -> list[str]:
    """``public score 0.1234`` (``score`` of a sample run: the sample split is public), ``private score ...``, ``full score ...``."""
    parts = []
    for key, label in SCORE_LABELS:
        value = view.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            name = "sample" if key == "score" and view.get("track") == "sample" else label
            parts.append(f"{name} score {value:.4f}")
    return parts


def _line(view: dict[str, Any]) -> str:
    """One submission on one line. Every string in it is the server's, so each is escaped for the terminal
    (:func:`grader.text.escape_control`; the last log line and the name quoted as :func:`grader.text.quote_id` does)."""
    parts = [escape_control(view["id"]), escape_control(view["state"])]
    if view.get("failure_code"):
        parts.append(escape_control(view["failure_code"]))
    parts.extend(_scores(view))
    if view.get("last_log_line"):
        parts.append(f"last log line: {quote_id(view['last_log_line'], MAX_STDERR_LINE)}")
    queue = queue_of(view)
    if queue is not None:
        parts.append(escape_control(queue_words(queue)))
        parts.extend(escape_control(task_words(task)) for task in queue.progress)
    return "  ".join(parts)


class UploadProgress:
    """The upload's progress on stderr: a redrawn bar on a terminal; in a log, a plain line at each quarter."""

    WIDTH = 30
    STEPS = 4

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.reported = -1

    def __call__(self, sent: int, total: int) -> None:
        megabytes = f"{sent / 1e6:.1f}/{total / 1e6:.1f} MB"
        if self.tty:
            done = int(self.WIDTH * sent / total) if total else self.WIDTH
            self.stream.write(f"\rupload [{'#' * done}{'.' * (self.WIDTH - done)}] {megabytes}")
            if sent >= total:
                self.stream.write("\n")
        else:
            step = self.STEPS if not total or sent >= total else int(self.STEPS * sent / total)
            if step <= self.reported:
                return
            self.reported = step
            self.stream.write(f"upload: {megabytes} ({100 * step // self.STEPS} %)\n")
        self.stream.flush()

    def waiting(self, wait: float, waited: float, bound: float) -> None:
        """A line per wait while the server is still receiving another copy of this upload (409 "in progress")."""
        self.stream.write(
            f"upload: the server is still receiving another copy of this upload; sending again in {wait:.0f} s (waited {waited:.0f} of {bound:.0f} s)\n"
        )
        self.stream.flush()
        self.reported = -1  # the next try's quarters are shown again


def _watch(client: HostingClient, submission_id: str, poll_s: float) -> None:
    """Follow the submission on one line (stderr) until it ends; its last line on stdout, and the exit status of ``--wait``."""
    shown = WatchLine()
    try:
        view = client.wait(submission_id, poll_s=poll_s, on_poll=lambda v: shown.show(_line(v)))
    finally:
        shown.close()
    click.echo(_line(view))
    click.get_current_context().exit(REMOTE_STATE_EXIT.get(view["state"], EXIT_SUBMISSION))


def _finish(client: HostingClient, submission_id: str) -> None:
    # Each state on its way goes to stderr; the last one only to stdout, once.
    view = client.wait(
        submission_id,
        poll_s=FIRST_LOOK_S,
        max_poll_s=MAX_LOOK_S,
        on_change=lambda v: click.echo(_line(v), err=True) if v["state"] not in TERMINAL else None,
    )
    click.echo(_line(view))
    click.get_current_context().exit(REMOTE_STATE_EXIT.get(view["state"], EXIT_SUBMISSION))


@click.command("submit")
@click.argument("submission", type=click.Path(path_type=Path))
@_server_option
@click.option("--wait", is_flag=True, help="Follow the grading; exit 0 scored, 1 failed, 3 error/cancelled.")
@click.option("--sample", is_flag=True, help="Run on the public sample split instead: logs visible, separate quota.")
@click.option(
    "--phase",
    metavar="NAME",
    default=None,
    help="The phase this submission is meant for (default: the open one); refused, before uploading, unless it is open now.",
)
@click.option(
    "--receipt",
    "receipt_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Save the upload's log receipt: FILE (the entry, its entry key and index, as JSON) and FILE.tlog-proof (its inclusion proof).",
)
def submit(submission: Path, server: str, token: str | None, wait: bool, sample: bool, phase: str | None, receipt_path: Path | None) -> None:
    """Check SUBMISSION against the competition and your quota, pack it, upload it, print its id.

    Whatever the server would refuse (window closed, quota used up, kind, training labels,
    size over the upload cap) is refused here first, with the server's words and exit 4,
    before a byte of the archive is sent. A Docker image is packed with docker save.
    """
    # An upload may take hours, and so may --wait: no command deadline, each fetch keeps its own.
    client = HostingClient(server, token_from(token), limits=FetchLimits.from_environment(follow=True))
    shown = UploadProgress()
    view = client.submit(submission, sample=sample, phase=phase, progress=shown, on_wait=shown.waiting)
    click.echo(escape_control(view["id"]))
    receipt = view.get("receipt")
    if receipt_path is not None and isinstance(receipt, dict):  # evidence that the upload was accepted (docs/transparency.md)
        from grader.files import atomic_write_bytes
        from grader.transparency.receipt import receipt_files

        kept, proof = receipt_files(receipt)  # `grader log verify-proof FILE.tlog-proof --entry FILE` reads them back
        atomic_write_bytes(receipt_path, kept)
        if proof is not None:
            atomic_write_bytes(f"{receipt_path}.tlog-proof", proof)
    if wait:
        _finish(client, view["id"])


@click.command("status")
@click.argument("submission_id")
@_server_option
@click.option("--wait", is_flag=True, help="Follow until it ends.")
@click.option(
    "--watch",
    is_flag=True,
    help="Follow until it ends on one line: place in the queue, estimate, why it waits, each task's progress (a line per change in a log).",
)
@click.option("--every", "every_s", type=click.FloatRange(0.2, 60), default=2.0, show_default=True, help="Seconds between looks of --watch.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Also save the signed report (when available to you), and its log proof beside it as REPORT.tlog-proof.",
)
@click.option("--logs", is_flag=True, help="Print the container logs (sample-split runs only).")
@click.option("--json", "as_json", is_flag=True)
def status(
    submission_id: str, server: str, token: str | None, wait: bool, watch: bool, every_s: float, report_path: Path | None, logs: bool, as_json: bool
) -> None:
    """Show one of your submissions: state, failure code, and each score the server shows you, labelled
    (public until the end; then also private and full); while it waits or runs, its place in the queue, the
    estimate of its start and end, why it waits and each task's progress. Exit 6 for an id the server does not know."""
    client = HostingClient(server, token_from(token), limits=FetchLimits.from_environment(follow=wait or watch))
    if watch:
        _watch(client, submission_id, every_s)
    if report_path is not None:
        from grader.files import atomic_write_bytes

        atomic_write_bytes(report_path, client.report(submission_id))
        proof = client.report_proof(submission_id)  # for `grader verify REPORT --log-key ...` (docs/transparency.md)
        if proof is not None:
            atomic_write_bytes(f"{report_path}.tlog-proof", proof)
    if logs:
        for name, text in client.logs(submission_id).items():
            click.echo(f"--- {escape_control(name)}\n{escape_lines(text)}")  # the container's words, line by line
    if wait:
        _finish(client, submission_id)
    view = client.status(submission_id)
    click.echo(jsonio.dumps(view, indent=2, ensure_ascii=True) if as_json else _line(view))


@click.command("submissions")
@_server_option
@click.option("--json", "as_json", is_flag=True)
def submissions(server: str, token: str | None, as_json: bool) -> None:
    """List your submissions, newest first, with each score labelled (public; after the end also private and full)."""
    views = HostingClient(server, token_from(token)).submissions()
    if as_json:
        click.echo(jsonio.dumps(views, indent=2, ensure_ascii=True))
        return
    for view in views:
        shown = (escape_control(view.get("track")), escape_control(view.get("uploaded_at")), quote_id(view.get("name"), 200))
        click.echo(f"{_line(view)}  {'  '.join(shown)}")


@click.command("quota")
@_server_option
@click.option("--json", "as_json", is_flag=True)
def quota(server: str, token: str | None, as_json: bool) -> None:
    """Your quota: per track, submissions used in the last 24 h and in total, in flight, and when the next is possible."""
    answer = HostingClient(server, token_from(token)).quota()
    if as_json:
        click.echo(jsonio.dumps(answer, indent=2, ensure_ascii=True))
        return
    for track in ("hidden", "sample"):
        q = answer.get(track) if isinstance(answer, dict) else None
        if not isinstance(q, dict):
            continue
        parts = [f"{track}: {q.get('used_24h')} of {q.get('per_day')} in the last 24 h"]
        if q.get("total") is not None:
            parts.append(f"{q.get('used_total')} of {q.get('total')} in total")
        parts.append(f"{q.get('in_flight')} of at most {q.get('concurrent')} being graded")
        if q.get("next_possible_at"):
            parts.append(f"next possible at {q['next_possible_at']}")
        click.echo(escape_control("; ".join(parts)))  # every value in it is the server's
    line = _refusals_line(answer.get("hidden") if isinstance(answer, dict) else None)
    if line:
        click.echo(line)


def _refusals_line(q: Any) -> str | None:
    """The refused uploads of the last hour against ``refusals_per_hour`` (None where the server's answer does not say)."""
    try:
        status = QuotaStatus.from_dict(q)
    except ClientError:
        return None
    limit, infra = status.refusals_per_hour, status.infra_per_hour
    if limit is None or infra is None:
        return None
    counted = status.refused_last_hour + max(0, status.errors_last_hour - infra)
    line = f"refused uploads: {counted} of at most {limit} in the last hour"
    if status.errors_last_hour:
        line += f" ({status.refused_last_hour} refused; {status.errors_last_hour} ended by a platform failure, those beyond {infra} counted)"
    if counted >= limit:
        line += f"; next upload possible at {iso(status.refusals_drop_at)}"
    return line


@click.command("finals")
@click.argument("submission_ids", nargs=-1)
@_server_option
@click.option("--json", "as_json", is_flag=True)
def finals(submission_ids: tuple[str, ...], server: str, token: str | None, as_json: bool) -> None:
    """Show your final submissions (those the private board takes), or choose them: grader finals ID [ID ...].

    Choosing replaces earlier choices and closes at the end. Without a choice the finals are your best public ones. In a
    competition of phases the choices are the last phase's; during an earlier phase whose next one re-grades the
    chosen (regrade = "chosen"), you choose among that phase's submissions those the next phase grades again.
    """
    client = HostingClient(server, token_from(token))
    answer = client.choose_finals(list(submission_ids)) if submission_ids else client.finals()
    if as_json:
        click.echo(jsonio.dumps(answer, indent=2, ensure_ascii=True))
        return
    listed = answer.get("finals")
    chosen = sorted(escape_control(i) for i in (listed if isinstance(listed, list) else []))
    how = "saved: chosen by you" if submission_ids else ("chosen by you" if answer.get("chosen") else "by default: your best public ones")
    click.echo(f"finals ({how}; at most {escape_control(answer.get('limit'))}): {', '.join(chosen) if chosen else 'none yet'}")


@click.command("archive")
@click.argument("submission", type=click.Path(path_type=Path))
@click.argument("target", type=click.Path(path_type=Path))
def archive(submission: Path, target: Path) -> None:
    """Check SUBMISSION (kinds and manifest, as `grader check` does) and write the .tar.gz `grader submit` would upload to TARGET.

    For the participant page's upload form: the archive to choose there. A Docker image is packed with docker save.
    """
    from grader.hosting.participant.client import write_archive

    if target.exists():
        raise UsageError(f"{target} already exists; choose a new file")
    size = write_archive(submission, target)
    click.echo(f"{escape_control(str(target))}: {size} bytes")


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    for command in (submit, status, submissions, quota, finals, archive):
        group.add_command(command)
