"""``grader sketch-training``: MinHash sketches of a participant's training texts, made on their own machine
(docs/contamination.md)."""

from __future__ import annotations

from pathlib import Path

import click

from grader.integrity.sketch_file import DEFAULT_MAX_BYTES


@click.command("sketch-training")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=Path), required=True, help="The sketch file to write.")
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Largest sketch file; on a hosted competition it counts against the upload cap together with the submission.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Processes that sketch at once (the file's bytes are the same whatever the number).",
)
@click.option(
    "--fine-windows/--no-fine-windows",
    default=True,
    show_default=True,
    help="Also cut long code texts into fine windows (80 tokens), so that short items copied inside them are found; "
    "about four times the rows of long code files.",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def sketch_training_command(paths: tuple[Path, ...], out_path: Path, max_bytes: int, workers: int, fine_windows: bool, quiet: bool) -> None:
    """Sketch the training texts in PATHS (files, folders, .jsonl corpora) into --out; the texts never leave this machine.

    The audit covers only what is sketched: the training data you declare."""
    from grader.cli.progress import StderrProgress
    from grader.integrity.sketch_build import build_sketch
    from grader.integrity.sketch_file import WITHOUT_FINE_WINDOWS, write_sketch
    from grader.integrity.sketch_text import SketchParameters
    from grader.integrity.training_texts import ReadCounts, iter_training_texts, total_bytes, training_files

    files = training_files(list(paths))
    counts = ReadCounts()
    progress = StderrProgress(quiet=quiet)
    progress.note(f"sketching the texts of {len(files)} file(s), {total_bytes(files)} bytes")
    # Bytes are the unit of progress: their total is known before the first file is read, and a large JSONL
    # corpus moves it line by line (its number of texts is not known until its end).
    advance = progress.progress("bytes of training data read", total_bytes(files))
    parameters = SketchParameters() if fine_windows else WITHOUT_FINE_WINDOWS
    sketch = build_sketch(iter_training_texts(files, counts, on_bytes=advance), parameters, max_bytes=max_bytes, workers=workers)
    size = write_sketch(out_path, sketch, max_bytes=max_bytes)
    skipped = f"; {len(counts.skipped)} file(s) not UTF-8, skipped (first: {counts.skipped[0]})" if counts.skipped else ""
    click.echo(
        f"{out_path}: {sketch.count} distinct signatures (windows and statement sets) of {counts.texts} texts from {counts.files} file(s), {size} bytes{skipped}"
    )


def register(group: click.Group) -> None:
    """Add ``sketch-training`` to ``group``."""
    group.add_command(sketch_training_command)
