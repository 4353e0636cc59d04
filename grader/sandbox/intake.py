"""Image intake, as strict hosts do it: local images only, amd64, non-root, bounded size.

A submission names a local image reference or a ``docker save`` tarball. Nothing
is ever pulled. The image ID (a sha256 over its configuration) is the report's
subject: it names exactly what ran.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.errors import SandboxUnavailable, SubmissionError, TaskFailure
from grader.failures import FailureCode
from grader.sandbox.engine import docker_client
from grader.submissions.image_archive import check_image_archive
from grader.text import quote_id

DEFAULT_MAX_IMAGE_BYTES = 20 << 30
_ROOT_USERS = {"", "root", "0"}


@dataclass(frozen=True)
class ImageInfo:
    """What intake established about an image."""

    id: str
    user: str
    architecture: str
    size: int
    reference: str
    #: where the image came from: ``submission`` (a docker save .tar inside the submission,
    #: loaded without its tags) or ``host`` (already in the engine's store before grading)
    origin: str = "host"

    @property
    def digest(self) -> str:
        """The hex sha256 of the image ID."""
        return self.id.split(":", 1)[1] if ":" in self.id else self.id


def _is_root(user: str) -> bool:
    name = user.split(":", 1)[0].strip()
    return name in _ROOT_USERS


def _without_tags(source_path: Path, target_path: Path) -> Path:
    """A copy of a ``docker save`` tar that names no tags.

    ``docker load`` applies the tags an archive carries, so a submission's tar could
    re-point any local tag (the runner image, another submission's image). The copy
    drops ``repositories`` and empties ``RepoTags``; intake then knows the image by ID only.
    """
    with tarfile.open(source_path) as source, tarfile.open(target_path, "w") as target:
        for member in source:
            if member.name in ("repositories", "./repositories"):
                continue
            data = source.extractfile(member) if member.isfile() else None
            if member.name in ("manifest.json", "./manifest.json") and data is not None:
                entries = jsonio.loads(data.read(1 << 20))
                for entry in entries:
                    entry["RepoTags"] = None
                payload = jsonio.dumps(entries).encode("utf-8")
                member.size = len(payload)
                data = io.BytesIO(payload)
            target.addfile(member, data)
    return target_path


def _load_tar(path: Path, max_bytes: int) -> str:
    """Load a ``docker save`` tar holding exactly one image; return its ID."""
    if path.stat().st_size > max_bytes:
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"{path}: image tar is larger than {max_bytes} bytes")
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile("manifest.json")
            manifest = jsonio.loads(member.read(1 << 20)) if member else None
    except (tarfile.TarError, KeyError, jsonio.JsonError, OSError) as exc:
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"{path}: not a docker save archive ({type(exc).__name__})") from None
    if not isinstance(manifest, list) or len(manifest) != 1:
        count = len(manifest) if isinstance(manifest, list) else 0
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"{path}: the archive must hold exactly one image, it holds {count}")
    try:
        structure = check_image_archive(path, label=path.name, max_unpacked_bytes=max_bytes)
    except SubmissionError as error:
        raise TaskFailure(FailureCode.IMAGE_INVALID, str(error)) from None
    image_id = "sha256:" + structure.config_sha256
    client = docker_client()
    with tempfile.TemporaryDirectory(prefix="grader-image-") as scratch:
        untagged = _without_tags(path, Path(scratch) / "image.tar")
        loaded = _engine_load(client, untagged, path)
    if len(loaded) != 1:
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"{path}: the archive must hold exactly one image, it held {len(loaded)}")
    return loaded[0].id if loaded[0].id else image_id


def _engine_load(client: Any, tar: Path, shown: Path) -> list[Any]:
    """``docker load`` the tar; tell the submission's fault (IMAGE_INVALID) from the engine's (SandboxUnavailable).

    The tar passed :func:`check_image_archive`, so its parts are all there and sound. An engine
    that answers with a refusal of its content (a layer naming a link target it does not hold, a
    configuration it cannot parse) refuses what the participant uploaded: charged. An engine that
    does not answer, answers with a server error, or then also refuses a minimal valid image
    (a full disk, a broken store) is the platform's fault: retried, never charged.
    """
    import docker.errors

    try:
        with open(tar, "rb") as handle:
            return list(client.images.load(handle))
    except docker.errors.ImageLoadError as exc:
        refusal = str(exc)
    except docker.errors.APIError as exc:
        if exc.status_code is None or exc.status_code >= 500:
            raise SandboxUnavailable(f"docker could not load {shown}: {type(exc).__name__}: {exc}") from None
        refusal = str(exc.explanation or exc)
    except Exception as exc:
        raise SandboxUnavailable(f"docker could not load {shown}: {type(exc).__name__}: {exc}") from None
    if not _engine_loads_control(client):
        raise SandboxUnavailable(f"docker could not load {shown} ({refusal}), nor a minimal valid image") from None
    raise TaskFailure(FailureCode.IMAGE_INVALID, f"{shown.name}: the container engine refused the image: {refusal}")


def _tar_of(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def control_image_tar() -> bytes:
    """A minimal valid ``docker save`` tar (one layer holding one empty file; no tags), always the same bytes."""
    layer = _tar_of([("grader-control", b"")])
    config = jsonio.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"User": "65534"},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        },
        sort_keys=True,
    ).encode("utf-8")
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = hashlib.sha256(layer).hexdigest() + "/layer.tar"
    manifest = jsonio.dumps([{"Config": config_name, "RepoTags": None, "Layers": [layer_name]}]).encode("utf-8")
    return _tar_of([(config_name, config), (layer_name, layer), ("manifest.json", manifest)])


def _engine_loads_control(client: Any) -> bool:
    """Whether the engine loads :func:`control_image_tar` (then removed again): it works, so a refusal was the image's."""
    try:
        loaded = client.images.load(control_image_tar())
        for image in loaded:
            with contextlib.suppress(Exception):  # another worker may be using it right now; it is tiny either way
                client.images.remove(image.id)
    except Exception:
        return False
    return True


def inspect_image(reference: str, *, base: Path, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES, submission_only: bool = False) -> ImageInfo:
    """Resolve and validate an image named by a submission manifest.

    With ``submission_only`` (``--images-from-submission-only``, the hosting
    default), only a ``docker save`` tar inside the submission is accepted: a
    reference to an image already on the host is ``IMAGE_INVALID``, so a
    submission cannot have another party's image signed under its name.
    """
    client = docker_client()
    candidate = (base / reference) if not Path(reference).is_absolute() else Path(reference)
    if reference.endswith(".tar") and candidate.is_file():
        image_ref = _load_tar(candidate, max_bytes)
        origin = "submission"
    else:
        if submission_only:
            raise TaskFailure(
                FailureCode.IMAGE_INVALID,
                f"image {quote_id(reference)} names an image on the host; only an image in the submission's own docker save .tar is accepted here",
                hint="`docker save -o image.tar IMAGE`, put image.tar in the submission and name it in submission.json",
            )
        image_ref = reference
        origin = "host"
    try:
        import docker.errors

        image = client.images.get(image_ref)
    except docker.errors.ImageNotFound:
        raise TaskFailure(
            FailureCode.IMAGE_INVALID,
            f"image {reference!r} is not present locally (the grader never pulls)",
            hint="build or `docker load` it first, or name a docker save .tar inside the submission",
        ) from None
    except docker.errors.APIError as exc:
        if exc.status_code != 400:  # the engine's fault, not the submission's
            raise SandboxUnavailable(f"docker could not inspect {reference!r}: {type(exc).__name__}") from None
        # 400: the reference itself is malformed (upper case, spaces...): the submission's fault.
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"{reference!r} is not a valid image reference: {exc.explanation}") from None
    except Exception as exc:
        raise SandboxUnavailable(f"docker could not inspect {reference!r}: {type(exc).__name__}") from None
    attrs = image.attrs
    architecture = attrs.get("Architecture", "")
    if architecture != "amd64" or attrs.get("Os", "linux") != "linux":
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"image {reference!r} is {attrs.get('Os')}/{architecture}; linux/amd64 is required")
    user = (attrs.get("Config") or {}).get("User") or ""
    if _is_root(user):
        raise TaskFailure(
            FailureCode.IMAGE_INVALID,
            f"image {reference!r} runs as root (USER is {user!r}); set a non-root USER",
            hint="add e.g. `USER 10001` to the Dockerfile",
        )
    size = int(attrs.get("Size", 0))
    if size > max_bytes:
        raise TaskFailure(FailureCode.IMAGE_INVALID, f"image {reference!r} is {size} bytes, over the {max_bytes}-byte cap")
    return ImageInfo(id=image.id, user=user, architecture=architecture, size=size, reference=reference, origin=origin)
