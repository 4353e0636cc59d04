"""``grader reveal-check URL``: check a finished competition's revealed secret and private board from outside."""

from __future__ import annotations

import click

from grader.errors import VerificationError
from grader.text import escape_control


@click.command("reveal-check")
@click.argument("server")
@click.option(
    "--key",
    "key_path",
    default=None,
    help="The host's public key as you saved it on the first day (SERVER/host-key.pub); without it, the key the server serves now.",
)
def reveal_check(server: str, key_path: str | None) -> None:
    """Check SERVER's reveal: the secret matches its commitment, every private score re-derives from its signed report.

    One line per check; exit 0 when all pass, 1 when any fails, 5 when the server cannot be reached.
    """
    from grader.hosting.participant.reveal_check import Fetcher, check, public_key_from_pem
    from grader.reports.keys import load_public_key

    fetcher = Fetcher(server)
    try:
        if key_path is None:
            key = public_key_from_pem(fetcher.get("/host-key.pub"), f"{fetcher.server}/host-key.pub")
            click.echo("note: using the host key the server serves now; pass --key with the copy saved on the first day to rule out a swapped key")
        else:
            key = load_public_key(key_path)
        failed = 0
        for line in check(fetcher.get, fetcher.json, key):
            click.echo(("ok:     " if line.ok else "FAILED: ") + escape_control(line.text))  # lines quote the server's numbers
            failed += not line.ok
    finally:
        fetcher.close()
    if failed:
        raise VerificationError(f"{failed} check(s) failed")
    click.echo("reveal verified")


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(reveal_check)
