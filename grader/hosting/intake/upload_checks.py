"""Checks of an upload before it becomes a submission: the same code as ``grader check`` steps 1-2.

Step 1 (archive and manifest) is the grader's own: :func:`open_submission`
(no links, no ``..``, bounded size), :func:`load_manifest` and the content
digest. Step 2 (intake) is its static part: the ONNX model's graph and
tokenizer are inspected without running them; a Docker submission must carry
its image as a ``docker save`` tar inside the upload (a server never grades an
image named by tag: that would let a participant run any image on the host).
The client runs the same function before uploading; the server runs it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.errors import SubmissionError
from grader.integrity.sketch_file import DEFAULT_MAX_BYTES, SUBMISSION_SKETCH, SketchFileError, TrainingSketch, read_sketch
from grader.submissions.archive import ArchiveLimits, open_submission
from grader.submissions.digest import submission_digest
from grader.submissions.image_archive import check_image_archive
from grader.submissions.manifest import DockerManifest, Manifest, OnnxManifest, load_manifest
from grader.submissions.onnx_intake import inspect_onnx_model
from grader.text import first_unprintable

MAX_NAME_CHARS = 200
MAX_MANIFEST_BYTES = 1 << 20


@dataclass(frozen=True)
class CheckedSubmission:
    """What the checks learnt: the manifest, the content digest, and the training sketch the upload carried (or None)."""

    manifest: Manifest
    digest: str
    training_sketch: TrainingSketch | None = None

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def kind(self) -> str:
        return self.manifest.kind


#: How to declare the labels, quoted in the refusal.
TRAINING_EXAMPLE = '"training": {"setting": "zero-shot"} or {"setting": "fine-tuned", "datasets": ["..."]}; grader pack --training-setting writes it'


def missing_training_labels(manifest: Manifest) -> tuple[str, str] | None:
    """What a competition that requires training labels misses in ``manifest``: (field, one line), or None.

    A setting is required; a fine-tuned one must also name what it was trained on. A
    zero-shot model may list its training data or not (docs/pack.md says what zero-shot means).
    """
    training = manifest.training
    if training.setting is None:
        return "training", f"missing: this competition requires a declared training setting ({TRAINING_EXAMPLE})"
    if training.setting == "fine-tuned" and not training.datasets:
        return (
            "training.datasets",
            'missing: a "fine-tuned" submission must name the datasets it was trained on here (this competition requires training labels)',
        )
    return None


def check_manifest_rules(manifest: Manifest, *, path: Path, kinds: tuple[str, ...], require_training_labels: bool) -> None:
    """The competition's own rules on a manifest (kind allowed, name length, training labels)."""
    if len(manifest.name) > MAX_NAME_CHARS or first_unprintable(manifest.name):
        raise SubmissionError(f"must be at most {MAX_NAME_CHARS} printable characters", path=path, field="name")
    if manifest.kind not in kinds:
        raise SubmissionError(f"{manifest.kind!r} submissions are not accepted here (allowed: {', '.join(kinds)})", path=path, field="kind")
    if require_training_labels:
        missing = missing_training_labels(manifest)
        if missing is not None:
            field, what = missing
            raise SubmissionError(what, path=path, field=field)
    if isinstance(manifest, DockerManifest) and manifest.mode == "translate":
        raise SubmissionError("translate-mode images are not graded on retrieval tasks", path=path, field="mode")


def _check_image_tar(folder: Path, manifest: DockerManifest, path: Path, *, max_unpacked_bytes: int) -> None:
    reference = manifest.image
    relative = PurePosixPath(reference)
    if not reference.endswith(".tar") or relative.is_absolute() or ".." in relative.parts:
        raise SubmissionError(
            "a Docker submission must carry its image as a `docker save` .tar inside the upload (grader submit does this)", path=path, field="image"
        )
    tar_path = folder / relative
    if tar_path.is_symlink() or not tar_path.is_file():
        raise SubmissionError(f"{reference!r} is not a file in the upload", path=path, field="image")
    check_image_archive(tar_path, label=relative.as_posix(), max_unpacked_bytes=max_unpacked_bytes)


def check_submission(
    upload: Path,
    *,
    kinds: tuple[str, ...] = ("onnx", "docker"),
    require_training_labels: bool = False,
    image_as_tar: bool = True,
    limits: ArchiveLimits = ArchiveLimits(),
) -> CheckedSubmission:
    """Check an upload (folder or archive): archive, manifest, competition rules, static intake.

    An optional ``training.sketch`` (``grader sketch-training``) is read and returned for the hosted contamination audit.
    Raises :class:`SubmissionError` (one line naming the file and field) on the first problem.
    """
    with open_submission(upload, limits) as folder:
        manifest_path = folder / "submission.json"
        if manifest_path.is_file() and manifest_path.stat().st_size > MAX_MANIFEST_BYTES:
            raise SubmissionError(f"larger than {MAX_MANIFEST_BYTES} bytes", path="submission.json")
        manifest = load_manifest(folder)
        check_manifest_rules(manifest, path=Path("submission.json"), kinds=kinds, require_training_labels=require_training_labels)
        sketch = _training_sketch(folder, limits)  # before the model's and image's heavier checks
        digest = submission_digest(folder)
        if isinstance(manifest, OnnxManifest):
            inspect_onnx_model(folder, manifest)
        elif isinstance(manifest, DockerManifest) and image_as_tar:
            _check_image_tar(folder, manifest, Path("submission.json"), max_unpacked_bytes=limits.max_total_bytes)
    return CheckedSubmission(manifest, digest, sketch)


def _training_sketch(folder: Path, limits: ArchiveLimits) -> TrainingSketch | None:
    """The training sketch at ``training.sketch`` beside submission.json, read strictly; None when there is none.

    Its bytes are part of the upload, so ``upload.max_bytes`` (and the unpacked bound) bound it already; the reader
    also stops at the sketch format's own cap. A malformed sketch refuses the upload with one line naming the field.
    """
    path = folder / SUBMISSION_SKETCH
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_sketch(path, max_bytes=min(DEFAULT_MAX_BYTES, limits.max_total_bytes))
    except SketchFileError as error:
        raise SubmissionError(error.what, path=SUBMISSION_SKETCH, field=error.field) from None
