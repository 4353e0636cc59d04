"""``grader keygen``: create the Ed25519 key pair that signs reports, and the blinding key beside it."""

from __future__ import annotations

import os
from pathlib import Path

import click

from grader.reports.keys import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME, keyid, load_public_key, write_keypair
from grader.sandbox.blinding_key import BLINDING_KEY_NAME, write_blinding_key


@click.command("keygen")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write grader.key (private, mode 0600), grader.pub and blinding.key (secret, mode 0600) into.",
)
def keygen(out_dir: Path) -> None:
    """Create a signing key pair and a blinding key. Refuses to overwrite existing key files.

    Where the pair exists but has no blinding key beside it (made by an older
    grader), only the blinding key is written: signed runs need it.
    """
    pair = [out_dir / PRIVATE_KEY_NAME, out_dir / PUBLIC_KEY_NAME]
    blinding_path = out_dir / BLINDING_KEY_NAME
    if all(os.path.lexists(path) for path in pair) and not os.path.lexists(blinding_path):
        blinding = write_blinding_key(blinding_path)
        click.echo(f"wrote {blinding_path} (blinding key, mode 0600; keep it secret) beside the existing pair")
        click.echo(f"blinding key id: {blinding.key_id}")
        return
    private_path, public_path = write_keypair(out_dir)
    click.echo(f"wrote {private_path} (private key, mode 0600; keep it secret)")
    click.echo(f"wrote {public_path} (public key; give it to whoever verifies reports)")
    click.echo(f"keyid: {keyid(load_public_key(public_path))}")
    if os.path.lexists(blinding_path):
        click.echo(f"kept the existing {blinding_path}")
        return
    blinding = write_blinding_key(blinding_path)
    click.echo(f"wrote {blinding_path} (blinding key, mode 0600; keep it secret: it hides the benchmark's ids from containers)")
    click.echo(f"blinding key id: {blinding.key_id}")


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(keygen)
