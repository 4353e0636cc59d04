"""``grader keygen``: create the Ed25519 key pair that signs reports."""

from __future__ import annotations

from pathlib import Path

import click

from grader.reports.keys import keyid, load_public_key, write_keypair


@click.command("keygen")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write grader.key (private, mode 0600) and grader.pub into.",
)
def keygen(out_dir: Path) -> None:
    """Create a signing key pair. Refuses to overwrite existing key files."""
    private_path, public_path = write_keypair(out_dir)
    click.echo(f"wrote {private_path} (private key, mode 0600; keep it secret)")
    click.echo(f"wrote {public_path} (public key; give it to whoever verifies reports)")
    click.echo(f"keyid: {keyid(load_public_key(public_path))}")


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(keygen)
