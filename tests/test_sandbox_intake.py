"""Image intake against a real engine: local images only, non-root, exactly one image per tar, never a pull."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from grader.errors import TaskFailure
from grader.sandbox.intake import inspect_image
from tests.sandbox_support import image_of, unavailable

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine"), pytest.mark.slow]


def docker_save(out: Path, *images: str) -> Path:
    """``docker save IMAGES -o OUT`` with the docker CLI (the SDK saves one image at a time)."""
    if shutil.which("docker") is None:
        unavailable("the docker CLI is not installed (needed for `docker save` of several images)")
    subprocess.run(["docker", "save", *images, "-o", str(out)], check=True, capture_output=True, timeout=120)
    return out


def pulls_since(client, since: float) -> list[dict]:  # type: ignore[no-untyped-def]
    """Image pull events the engine recorded since ``since`` (epoch seconds)."""
    events = client.events(since=int(since) - 1, until=int(time.time()) + 1, filters={"type": "image", "event": "pull"}, decode=True)
    return list(events)


@pytest.mark.docker(image_of("scripted"))
def test_a_non_root_local_image_passes_intake(docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    info = inspect_image(image_of("scripted"), base=tmp_path)
    assert info.id == docker_engine.images.get(image_of("scripted")).id
    assert info.id.startswith("sha256:") and info.digest == info.id.split(":", 1)[1]
    assert info.user == "10001"
    assert info.architecture == "amd64"
    assert info.reference == image_of("scripted")
    assert info.size > 0


@pytest.mark.docker(image_of("rootuser"))
def test_a_root_image_is_refused_at_intake(tmp_path: Path) -> None:
    with pytest.raises(TaskFailure) as caught:
        inspect_image(image_of("rootuser"), base=tmp_path)
    assert caught.value.code == "IMAGE_INVALID"
    assert caught.value.detail == f"image {image_of('rootuser')!r} runs as root (USER is ''); set a non-root USER"
    assert "USER" in (caught.value.hint or "")


@pytest.mark.docker(image_of("silent"), image_of("sleeper"))
def test_a_tar_of_several_images_is_refused(docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # By ID: loading such a tar (it is refused before that) could never move a shared tag.
    docker_save(tmp_path / "multi.tar", docker_engine.images.get(image_of("silent")).id, docker_engine.images.get(image_of("sleeper")).id)
    with pytest.raises(TaskFailure) as caught:
        inspect_image("multi.tar", base=tmp_path)
    assert caught.value.code == "IMAGE_INVALID"
    assert caught.value.detail == f"{tmp_path / 'multi.tar'}: the archive must hold exactly one image, it holds 2"


@pytest.mark.slow
@pytest.mark.docker(image_of("silent"))
def test_a_single_image_tar_loads_and_passes_intake(docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Saved by ID, so loading it back re-tags nothing (other people may be rebuilding the tags).
    expected = docker_engine.images.get(image_of("silent")).id
    docker_save(tmp_path / "silent.tar", expected)
    info = inspect_image("silent.tar", base=tmp_path)
    assert info.id == expected
    assert info.user == "10001" and info.architecture == "amd64"
    assert info.reference == "silent.tar"
    # An absolute path works too.
    assert inspect_image(str(tmp_path / "silent.tar"), base=Path("/nonexistent")).id == expected


def test_a_tar_that_is_not_a_docker_save_archive_is_refused(tmp_path: Path) -> None:
    payload = tmp_path / "payload.txt"
    payload.write_text("not an image\n", encoding="utf-8")
    with tarfile.open(tmp_path / "junk.tar", "w") as tar:
        tar.add(payload, arcname="payload.txt")
    with pytest.raises(TaskFailure) as caught:
        inspect_image("junk.tar", base=tmp_path)
    assert caught.value.code == "IMAGE_INVALID"
    assert "not a docker save archive" in caught.value.detail


@pytest.mark.parametrize("reference", ["grader-test-no-such-image:0", "hello-world:latest", "docker.io/library/busybox:1.36.1"])
def test_a_missing_image_is_refused_without_pulling(docker_engine, tmp_path: Path, reference: str) -> None:  # type: ignore[no-untyped-def]
    import docker.errors

    try:
        docker_engine.images.get(reference)
    except docker.errors.ImageNotFound:
        pass
    else:
        pytest.skip(f"{reference} is present locally: cannot show it is not pulled")
    started = time.time()
    with pytest.raises(TaskFailure) as caught:
        inspect_image(reference, base=tmp_path)
    assert caught.value.code == "IMAGE_INVALID"
    assert caught.value.detail == f"image {reference!r} is not present locally (the grader never pulls)"
    with pytest.raises(docker.errors.ImageNotFound):
        docker_engine.images.get(reference)
    assert pulls_since(docker_engine, started) == []


@pytest.mark.docker(image_of("silent"), image_of("sleeper"))
def test_loading_a_submission_tar_does_not_move_local_tags(docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import io
    import json

    silent_id = docker_engine.images.get(image_of("silent")).id
    sleeper_id = docker_engine.images.get(image_of("sleeper")).id
    victim = f"grader-test-victim-{uuid.uuid4().hex[:12]}"
    docker_engine.images.get(silent_id).tag(victim, "1")
    try:
        plain = docker_save(tmp_path / "plain.tar", sleeper_id)
        evil = tmp_path / "evil.tar"
        with tarfile.open(plain) as source, tarfile.open(evil, "w") as target:
            for member in source.getmembers():
                data = source.extractfile(member) if member.isfile() else None
                if member.name == "manifest.json":
                    manifest = json.loads(data.read())  # type: ignore[union-attr]
                    manifest[0]["RepoTags"] = [f"{victim}:1"]
                    payload = json.dumps(manifest).encode()
                    member.size = len(payload)
                    data = io.BytesIO(payload)
                target.addfile(member, data)
        assert inspect_image("evil.tar", base=tmp_path).id == sleeper_id
        assert docker_engine.images.get(f"{victim}:1").id == silent_id, "the submission's tar re-tagged a local image"
    finally:
        docker_engine.images.remove(f"{victim}:1", noprune=True)
