"""Image intake, as strict hosts do it: local images only, amd64, non-root, bounded size.

A submission names a local image reference or a ``docker save`` tarball. Nothing
is ever pulled. The image ID (a sha256 over its configuration) is the report's
subject: it names exactly what ran.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

from grader.errors import SandboxUnavailable, TaskFailure
from grader.sandbox.engine import docker_client

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

    @property
    def digest(self) -> str:
        """The hex sha256 of the image ID."""
        return self.id.split(":", 1)[1] if ":" in self.id else self.id


def _is_root(user: str) -> bool:
    name = user.split(":", 1)[0].strip()
    return name in _ROOT_USERS


def _load_tar(path: Path, max_bytes: int) -> str:
    """Load a ``docker save`` tar holding exactly one image; return its ID."""
    if path.stat().st_size > max_bytes:
        raise TaskFailure("IMAGE_INVALID", f"{path}: image tar is larger than {max_bytes} bytes")
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile("manifest.json")
            manifest = json.loads(member.read(1 << 20)) if member else None
    except (tarfile.TarError, KeyError, json.JSONDecodeError, OSError) as exc:
        raise TaskFailure("IMAGE_INVALID", f"{path}: not a docker save archive ({type(exc).__name__})") from None
    if not isinstance(manifest, list) or len(manifest) != 1:
        count = len(manifest) if isinstance(manifest, list) else 0
        raise TaskFailure("IMAGE_INVALID", f"{path}: the archive must hold exactly one image, it holds {count}")
    config = manifest[0].get("Config", "")
    image_id = "sha256:" + Path(config).name.removesuffix(".json")
    client = docker_client()
    try:
        with open(path, "rb") as handle:
            loaded = client.images.load(handle)
    except Exception as exc:
        raise SandboxUnavailable(f"docker could not load {path}: {type(exc).__name__}: {exc}") from None
    if len(loaded) != 1:
        raise TaskFailure("IMAGE_INVALID", f"{path}: the archive must hold exactly one image, it held {len(loaded)}")
    return loaded[0].id if loaded[0].id else image_id


def inspect_image(reference: str, *, base: Path, max_bytes: int = DEFAULT_MAX_IMAGE_BYTES) -> ImageInfo:
    """Resolve and validate an image named by a submission manifest."""
    client = docker_client()
    candidate = (base / reference) if not Path(reference).is_absolute() else Path(reference)
    if reference.endswith(".tar") and candidate.is_file():
        image_ref = _load_tar(candidate, max_bytes)
    else:
        image_ref = reference
    try:
        import docker.errors

        image = client.images.get(image_ref)
    except docker.errors.ImageNotFound:
        raise TaskFailure(
            "IMAGE_INVALID",
            f"image {reference!r} is not present locally (the grader never pulls)",
            hint="build or `docker load` it first, or name a docker save .tar inside the submission",
        ) from None
    except Exception as exc:
        raise SandboxUnavailable(f"docker could not inspect {reference!r}: {type(exc).__name__}") from None
    attrs = image.attrs
    architecture = attrs.get("Architecture", "")
    if architecture != "amd64" or attrs.get("Os", "linux") != "linux":
        raise TaskFailure("IMAGE_INVALID", f"image {reference!r} is {attrs.get('Os')}/{architecture}; linux/amd64 is required")
    user = (attrs.get("Config") or {}).get("User") or ""
    if _is_root(user):
        raise TaskFailure(
            "IMAGE_INVALID",
            f"image {reference!r} runs as root (USER is {user!r}); set a non-root USER",
            hint="add e.g. `USER 10001` to the Dockerfile",
        )
    size = int(attrs.get("Size", 0))
    if size > max_bytes:
        raise TaskFailure("IMAGE_INVALID", f"image {reference!r} is {size} bytes, over the {max_bytes}-byte cap")
    return ImageInfo(id=image.id, user=user, architecture=architecture, size=size, reference=reference)
