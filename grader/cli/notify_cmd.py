"""``grader notify``: a participant's notifications of a hosted competition (docs/hosting.md, "Notifications").

``set URL`` (the signing secret printed once, or written to ``--secret-file``), ``clear``, ``email ADDRESS`` /
``email --clear``, ``test``, ``show``, and ``listen``: a receiver on loopback that checks each delivery's signature.
Exit status: 0 done; 4 refused by the server (a URL or address it does not send to); 5 server unreachable or
another answer; 2 a usage error (``listen``: a port it cannot bind) (grader/cli/exits.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from grader import jsonio
from grader.cli.participant_session import participant_client, server_options
from grader.errors import UsageError
from grader.hosting.participant.receiver import Receiver
from grader.text import escape_control


@click.group("notify")
def notify() -> None:
    """Notifications of your submissions' state and board changes: a signed webhook, or e-mail."""


@notify.command("set")
@click.argument("url")
@click.option(
    "--secret-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the signing secret to this file (0600) instead of printing it.",
)
@server_options
def set_webhook(url: str, secret_file: Path | None, server: str, token: str | None) -> None:
    """Send each change to URL (POST, JSON, signed); prints the signing secret, shown this once."""
    if secret_file is not None and not secret_file.resolve().parent.is_dir():  # before the server makes a secret to lose
        raise UsageError(f"--secret-file: no folder {escape_control(secret_file.resolve().parent)}")
    with participant_client(server, token) as client:
        answer = client.notify("PUT", "/webhook", {"url": url})
    click.echo(f"webhook set: {escape_control(answer.get('url'))}")
    secret = str(answer.get("secret"))
    if secret_file is None:
        click.echo(f"signing secret (shown once; keep it where your receiver reads it): {escape_control(secret)}")
        return
    _write_secret(secret_file, secret)
    click.echo(f"signing secret written to {escape_control(secret_file)} (0600; shown nowhere else)")


def _write_secret(path: Path, secret: str) -> None:
    """``secret`` in ``path``, readable by its owner only from its first byte (replaced whole, never half-written)."""
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        file.write(secret + "\n")
    partial.replace(path)


@notify.command("clear")
@server_options
def clear_webhook(server: str, token: str | None) -> None:
    """Remove the webhook (nothing pending is sent to it)."""
    with participant_client(server, token) as client:
        client.notify("DELETE", "/webhook")
    click.echo("webhook cleared")


@notify.command("email")
@click.argument("address", required=False)
@click.option("--clear", "clear", is_flag=True, help="Remove the e-mail address.")
@server_options
def email(address: str | None, clear: bool, server: str, token: str | None) -> None:
    """Send each change to ADDRESS by e-mail (when the server has an SMTP relay); --clear removes it."""
    if clear == (address is not None):
        raise UsageError("give an ADDRESS or --clear")
    with participant_client(server, token) as client:
        if address is None:
            client.notify("DELETE", "/email")
        else:
            client.notify("PUT", "/email", {"address": address})
    click.echo("e-mail cleared" if address is None else f"e-mail set: {escape_control(address)}")


@notify.command("test")
@server_options
def test(server: str, token: str | None) -> None:
    """Send a test notification (type ping) to every address you set."""
    with participant_client(server, token) as client:
        count = client.notify("POST", "/test").get("deliveries")
    click.echo(f"test notification queued: {escape_control(count)} deliveries (`grader notify show` tells how they went)")


@notify.command("show")
@server_options
@click.option("--json", "as_json", is_flag=True)
def show(server: str, token: str | None, as_json: bool) -> None:
    """Your webhook and e-mail address (never the secret) and how your latest deliveries went."""
    with participant_client(server, token) as client:
        answer = client.notify("GET")
    if as_json:
        click.echo(jsonio.dumps(answer, indent=2, ensure_ascii=True))
        return
    click.echo(f"webhook: {escape_control(answer.get('webhook') or 'none')}")
    click.echo(f"e-mail: {escape_control(answer.get('email') or 'none')}")
    deliveries: list[Any] = answer.get("deliveries") if isinstance(answer.get("deliveries"), list) else []  # type: ignore[assignment]
    for row in deliveries:
        if isinstance(row, dict):
            keys = ("created_at", "channel", "type", "submission", "state", "outcome")
            click.echo("  ".join(escape_control(row.get(key) or "-") for key in keys))


@notify.command("listen")
@click.option("--port", type=click.IntRange(0, 65535), required=True, help="The port on 127.0.0.1 (0: any free one).")
@click.option(
    "--secret-file",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The signing secret's file, as `grader notify set --secret-file` writes it (read at each delivery).",
)
def listen(port: int, secret_file: Path) -> None:
    """A webhook receiver on 127.0.0.1 to try notifications out: checks each delivery's signature, prints a line each."""
    try:
        receiver = Receiver(port, secret_file, click.echo)
    except OSError as error:
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {error.strerror}") from None
    click.echo(f"listening on {receiver.url} (each delivery checked with the secret in {escape_control(secret_file)})")
    with receiver:
        receiver.serve_forever()


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(notify)
