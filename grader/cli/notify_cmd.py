"""``grader notify``: a participant's notifications of a hosted competition (docs/hosting.md, "Notifications").

``set URL`` (the signing secret printed once), ``clear``, ``email ADDRESS`` / ``email --clear``, ``test``, ``show``.
Exit status: 0 done; 4 refused by the server (a URL or address it does not send to); 5 server unreachable or
another answer (grader/cli/exits.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from grader import jsonio
from grader.errors import UsageError
from grader.hosting import environment
from grader.hosting.participant.client import HostingClient, token_from
from grader.text import escape_control


@contextmanager
def _client(server: str, token: str | None) -> Iterator[HostingClient]:
    """The participant's client, its connections closed at the end (a kept-alive one would hold the server's shutdown)."""
    client = HostingClient(server, token_from(token))
    try:
        yield client
    finally:
        client.http.close()


def _server_option(func):  # type: ignore[no-untyped-def]
    func = click.option("--token", default=None, help=f"Your token (default: ${environment.TOKEN}).")(func)
    return click.option("--server", required=True, envvar=environment.SERVER, help="The competition server's URL.")(func)


@click.group("notify")
def notify() -> None:
    """Notifications of your submissions' state and board changes: a signed webhook, or e-mail."""


@notify.command("set")
@click.argument("url")
@_server_option
def set_webhook(url: str, server: str, token: str | None) -> None:
    """Send each change to URL (POST, JSON, signed); prints the signing secret, shown this once."""
    with _client(server, token) as client:
        answer = client.notify("PUT", "/webhook", {"url": url})
    click.echo(f"webhook set: {escape_control(answer.get('url'))}")
    click.echo(f"signing secret (shown once; keep it where your receiver reads it): {escape_control(answer.get('secret'))}")


@notify.command("clear")
@_server_option
def clear_webhook(server: str, token: str | None) -> None:
    """Remove the webhook (nothing pending is sent to it)."""
    with _client(server, token) as client:
        client.notify("DELETE", "/webhook")
    click.echo("webhook cleared")


@notify.command("email")
@click.argument("address", required=False)
@click.option("--clear", "clear", is_flag=True, help="Remove the e-mail address.")
@_server_option
def email(address: str | None, clear: bool, server: str, token: str | None) -> None:
    """Send each change to ADDRESS by e-mail (when the server has an SMTP relay); --clear removes it."""
    if clear == (address is not None):
        raise UsageError("give an ADDRESS or --clear")
    with _client(server, token) as client:
        if address is None:
            client.notify("DELETE", "/email")
        else:
            client.notify("PUT", "/email", {"address": address})
    click.echo("e-mail cleared" if address is None else f"e-mail set: {escape_control(address)}")


@notify.command("test")
@_server_option
def test(server: str, token: str | None) -> None:
    """Send a test notification (type ping) to every address you set."""
    with _client(server, token) as client:
        count = client.notify("POST", "/test").get("deliveries")
    click.echo(f"test notification queued: {escape_control(count)} deliveries (`grader notify show` tells how they went)")


@notify.command("show")
@_server_option
@click.option("--json", "as_json", is_flag=True)
def show(server: str, token: str | None, as_json: bool) -> None:
    """Your webhook and e-mail address (never the secret) and how your latest deliveries went."""
    with _client(server, token) as client:
        answer = client.notify("GET")
    if as_json:
        click.echo(jsonio.dumps(answer, indent=2, ensure_ascii=True))
        return
    click.echo(f"webhook: {escape_control(answer.get('webhook') or 'none')}")
    click.echo(f"e-mail: {escape_control(answer.get('email') or 'none')}")
    deliveries: list[Any] = answer.get("deliveries") if isinstance(answer.get("deliveries"), list) else []  # type: ignore[assignment]
    for row in deliveries:
        if isinstance(row, dict):
            click.echo("  ".join(escape_control(row.get(key)) for key in ("created_at", "channel", "type", "submission", "outcome")))


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(notify)
