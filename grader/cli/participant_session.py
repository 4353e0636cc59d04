"""What the participant's small command groups (`grader notify`, `grader team`) share: the server and token options,
and a client whose connections are closed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from grader.hosting import environment
from grader.hosting.participant.client import HostingClient, token_from


@contextmanager
def participant_client(server: str, token: str | None) -> Iterator[HostingClient]:
    """The participant's client, its connections closed at the end (a kept-alive one would hold the server's shutdown)."""
    client = HostingClient(server, token_from(token))
    try:
        yield client
    finally:
        client.http.close()


def server_options(func):  # type: ignore[no-untyped-def]
    """``--server`` (or ``$GRADER_SERVER``) and ``--token`` (or ``$GRADER_TOKEN``) on a participant's command."""
    func = click.option("--token", default=None, help=f"Your token (default: ${environment.TOKEN}).")(func)
    return click.option("--server", required=True, envvar=environment.SERVER, help="The competition server's URL.")(func)
