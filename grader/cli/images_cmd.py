"""``grader images build``: build every Docker image the grader needs, registry or not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import click

from grader.errors import UsageError

SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent


@click.group("images")
def images_group() -> None:
    """Docker images: the runner, the examples, the sandbox test images."""


@images_group.command("build")
@click.option("--base", default=None, metavar="IMAGE", help="Base image of every Dockerfile (ARG BASE_IMAGE; default python:3.11-slim).")
@click.option("--offline", is_flag=True, help="Never pull: build grader-base:bookworm with debootstrap when the base is not present.")
def build_command(base: str | None, offline: bool) -> None:
    """Build grader-runner, the BM25 example and the test images (as root; installs Docker if missing).

    Python packages enter the images from a wheelhouse downloaded on the host
    (``pip download``), installed with ``--no-index``: no build step reaches a network.
    """
    script = SOURCE_ROOT / "images" / "build-all.sh"
    if not script.is_file():
        raise UsageError("image build scripts not found: `grader images build` runs from a source checkout", hint=f"looked for {script}")
    environment = dict(os.environ)
    if base:
        environment["GRADER_BASE_IMAGE"] = base
    if offline:
        environment["GRADER_OFFLINE"] = "1"
    completed = subprocess.run(["bash", str(script)], cwd=SOURCE_ROOT, env=environment, check=False)
    if completed.returncode != 0:
        raise UsageError(f"image build failed (exit status {completed.returncode}); see the output above")


def register(group: click.Group) -> None:
    """Add ``images`` to ``group``."""
    group.add_command(images_group)
