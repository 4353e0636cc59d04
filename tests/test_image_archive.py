"""Intake of a Docker submission's ``docker save`` tar: hostile archives refused.

A tar whose manifest names parts that are missing, cut short or malformed used to pass
intake (it only had to hold a member called manifest.json); `docker load` then failed on the
worker and every such failure read as the engine's (INFRA: retried, never charged). Now the
structure is checked before anything is stored, and what passes the checks but the engine still
refuses is the submission's own failure (IMAGE_INVALID, charged).
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest

from grader.errors import SandboxUnavailable, SubmissionError, TaskFailure
from grader.sandbox import intake
from grader.submissions.image_archive import MAX_LAYERS, check_image_archive
from tests.image_tars import engine_refused_tar, file_member, image_tar, layer, link_member, tar_of
from tests.sandbox_support import image_of

BUDGET = 1 << 30


def checked(tmp_path: Path, tar: bytes, budget: int = BUDGET):  # type: ignore[no-untyped-def]
    path = tmp_path / "image.tar"
    path.write_bytes(tar)
    return check_image_archive(path, label="image.tar", max_unpacked_bytes=budget)


def refusal(tmp_path: Path, tar: bytes, budget: int = BUDGET) -> str:
    with pytest.raises(SubmissionError) as caught:
        checked(tmp_path, tar, budget)
    assert caught.value.path == "image.tar"
    return caught.value.what


def test_a_sound_tar_passes_with_its_configuration_digest(tmp_path: Path) -> None:
    body = layer()
    found = checked(tmp_path, image_tar([body, layer({"b": b"x"})]))
    assert found.layers == 2
    assert found.config == found.config_sha256 + ".json"
    assert found.unpacked_bytes == len(body) + len(layer({"b": b"x"}))


def test_a_missing_layer_is_refused(tmp_path: Path) -> None:
    what = refusal(tmp_path, image_tar([layer(), layer({"b": b"x"})], omit=("layer1",)))
    assert what.startswith("layer 2 '") and what.endswith("/layer.tar' is missing")


def test_a_missing_configuration_is_refused(tmp_path: Path) -> None:
    assert refusal(tmp_path, image_tar([layer()], omit=("config",))).startswith("config '")


def test_a_truncated_layer_is_refused(tmp_path: Path) -> None:
    body = layer({"big": bytes(range(256)) * 64})
    what = refusal(tmp_path, image_tar([body], stored_layers={0: body[: len(body) // 2]}))
    assert what.startswith("layer 1 '") and "is not a readable tar" in what


def test_a_layer_cut_at_a_member_boundary_is_refused_by_its_digest(tmp_path: Path) -> None:
    body = layer({"a": b"x" * 512, "b": b"y" * 512})
    cut = body[: 512 + 512]  # the first member's header and data: a tar reader sees a clean end
    what = refusal(tmp_path, image_tar([body], stored_layers={0: cut}))
    assert "does not match the configuration's diff id 1" in what


def test_a_configuration_that_is_not_json_is_refused(tmp_path: Path) -> None:
    what = refusal(tmp_path, image_tar([layer()], config_bytes=b"{not json"))
    # Its name states the sha256 of the real configuration: the first thing that fails.
    assert "does not match its name's sha256" in what


def test_a_non_json_configuration_under_its_own_digest_is_refused(tmp_path: Path) -> None:
    garbage = b"{not json"
    name = __import__("hashlib").sha256(garbage).hexdigest() + ".json"
    manifest = json.dumps([{"Config": name, "RepoTags": None, "Layers": ["l/layer.tar"]}]).encode()
    tar = tar_of([file_member(name, garbage), file_member("l/layer.tar", layer()), file_member("manifest.json", manifest)])
    assert refusal(tmp_path, tar).startswith(f"config '{name}' is not valid JSON")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"os": "windows"}, "linux/amd64 is required"),
        ({"architecture": "arm64"}, "linux/amd64 is required"),
        ({"rootfs": {"type": "layers"}}, 'no "rootfs" of type "layers"'),
        ({"rootfs": {"type": "layers", "diff_ids": ["md5:00"]}}, "are not all sha256 digests"),
        ({"rootfs": {"type": "layers", "diff_ids": []}}, "the manifest names 1 layers but the image configuration has 0 diff ids"),
        ({"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}}, "does not match the configuration's diff id 1"),
    ],
)
def test_a_configuration_of_the_wrong_shape_is_refused(tmp_path: Path, change: dict, words: str) -> None:
    assert words in refusal(tmp_path, image_tar([layer()], config=change))


@pytest.mark.parametrize(
    "manifest",
    [
        b"[]",
        b"{}",
        b'[{"Config": "../x.json", "Layers": ["a"]}]',
        b'[{"Config": "/etc/passwd", "Layers": ["a"]}]',
        b'[{"Config": "c.json", "Layers": []}]',
    ],
)
def test_a_malformed_manifest_is_refused(tmp_path: Path, manifest: bytes) -> None:
    refusal(tmp_path, tar_of([file_member("c.json", b"{}"), file_member("manifest.json", manifest)]))


def test_no_manifest_and_not_a_tar_are_refused(tmp_path: Path) -> None:
    assert "no manifest.json" in refusal(tmp_path, tar_of([file_member("x", b"y")]))
    assert refusal(tmp_path, b"\x00garbage" * 100).startswith("not a readable docker save tar")


def test_too_many_layers_are_refused(tmp_path: Path) -> None:
    bodies = [layer({f"f{n}": b""}) for n in range(MAX_LAYERS + 1)]
    assert f"over the limit of {MAX_LAYERS}" in refusal(tmp_path, image_tar(bodies))


def test_layers_that_unpack_past_the_budget_are_refused(tmp_path: Path) -> None:
    body = layer({"zeros": bytes(1 << 20)})
    packed = gzip.compress(body)
    assert len(packed) < 10_000  # a small bomb: 1 MiB from a few kB
    assert "unpack to more than 100000 bytes" in refusal(tmp_path, image_tar([body], stored_layers={0: packed}), budget=100_000)
    assert checked(tmp_path, image_tar([body], stored_layers={0: packed})).unpacked_bytes == len(body)  # gzip layers are read


def test_a_linked_duplicate_layer_is_read_through_its_link_but_not_outside(tmp_path: Path) -> None:
    body = layer()
    names = ["a/layer.tar", "b/layer.tar"]
    inside = image_tar([body, body], layer_names=names, omit=("layer1",), extra=[link_member("b/layer.tar", "../a/layer.tar")])
    assert checked(tmp_path, inside).layers == 2
    outside = image_tar([body, body], layer_names=names, omit=("layer1",), extra=[link_member("b/layer.tar", "../../a/layer.tar")])
    assert "links outside the archive" in refusal(tmp_path, outside)


def test_engine_refused_tar_passes_the_structure_checks(tmp_path: Path) -> None:
    assert checked(tmp_path, engine_refused_tar()).layers == 1


@pytest.mark.slow
@pytest.mark.docker(image_of("tiny"))
def test_a_real_docker_save_tar_passes(docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    image = docker_engine.images.get(image_of("tiny"))
    subprocess.run(["docker", "save", image.id, "-o", str(tmp_path / "image.tar")], check=True, capture_output=True, timeout=120)
    found = check_image_archive(tmp_path / "image.tar", label="image.tar", max_unpacked_bytes=BUDGET)
    assert "sha256:" + found.config_sha256 == image.id


# --------------------------------------------------------------------------- after intake: the engine's word


@pytest.mark.slow
@pytest.mark.docker
def test_an_image_the_engine_refuses_is_the_submissions_failure(docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "image.tar").write_bytes(engine_refused_tar())
    with pytest.raises(TaskFailure) as caught:
        intake.inspect_image("image.tar", base=tmp_path, submission_only=True)
    assert caught.value.code == "IMAGE_INVALID"
    assert "the container engine refused the image" in caught.value.detail and "nothere" in caught.value.detail


@pytest.mark.slow
@pytest.mark.docker
def test_the_control_image_loads(docker_engine) -> None:  # type: ignore[no-untyped-def]
    # What tells a working engine from a broken one after a refusal: it must load on a working engine.
    assert intake._engine_loads_control(docker_engine)
    assert intake.control_image_tar() == intake.control_image_tar()


def test_an_engine_that_does_not_answer_is_infra(tmp_path: Path) -> None:
    import docker

    (tmp_path / "image.tar").write_bytes(engine_refused_tar())
    nobody = docker.DockerClient(base_url=f"unix://{tmp_path / 'no-engine.sock'}", version="1.41")  # no engine behind it
    with pytest.raises(SandboxUnavailable):
        intake._engine_load(nobody, tmp_path / "image.tar", tmp_path / "image.tar")
