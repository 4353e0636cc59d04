"""Manifest version 2: optional model facts (model_card), backward compatible with version-1 manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.errors import SubmissionError
from grader.hosting.intake.submissions import manifest_labels
from grader.submissions.manifest import load_manifest


def write(folder: Path, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission.json").write_text(
        json.dumps({"kind": "docker", "name": "x", "image": "img:1", "mode": "retrieve", **extra}), encoding="utf-8"
    )
    return folder


def test_version_one_manifest_is_unchanged(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path / "v1"))
    assert manifest.model_card == {} and manifest_labels(manifest) == {"model": {}}  # no training declared: no training label


def test_model_card_is_read_and_labelled(tmp_path: Path) -> None:
    card = {"parameters": 110_000_000, "dimension": 768, "max_length": 512, "license": "mit", "revision": "abc123"}
    manifest = load_manifest(write(tmp_path / "v2", manifest_version=2, model_card=card, training={"setting": "fine-tuned", "datasets": ["csn"]}))
    assert manifest_labels(manifest) == {"model": card, "training": {"setting": "fine-tuned", "datasets": ["csn"]}}


@pytest.mark.parametrize(
    "card, field",
    [({"parameters": 0}, "/model_card/parameters"), ({"licence": "mit"}, "/model_card"), ({"dimension": "768"}, "/model_card/dimension")],
)
def test_bad_model_card_is_refused_naming_the_field(tmp_path: Path, card: dict[str, object], field: str) -> None:
    with pytest.raises(SubmissionError) as caught:
        load_manifest(write(tmp_path / "bad", manifest_version=2, model_card=card))
    assert field in str(caught.value)


def test_unknown_manifest_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SubmissionError, match="manifest_version"):
        load_manifest(write(tmp_path / "v3", manifest_version=3))
