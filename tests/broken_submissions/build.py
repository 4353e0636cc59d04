"""Writes the deliberately broken submissions of this folder (run from the repository root).

    python tests/broken_submissions/build.py

Each sub-folder is one way a submission goes wrong; `tests/test_check_broken.py`
asserts the exact step of `grader check` that catches it and what the message
names. The ONNX models are the tiny lookup graphs of `tests/onnx_models.py`.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.onnx_models import embedding_table, lookup_model, onnx_submission, tokens_model  # noqa: E402


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "submission.json").read_text(encoding="utf-8"))


def _write_manifest(folder: Path, data: dict) -> None:
    (folder / "submission.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def build() -> None:
    for old in HERE.iterdir():
        if old.is_dir() and old.name != "__pycache__":
            shutil.rmtree(old)

    good = onnx_submission(HERE / "onnx-valid")

    bad_json = onnx_submission(HERE / "onnx-bad-json")
    (bad_json / "submission.json").write_text('{\n  "kind": "onnx",\n  "name": "x",\n  "model": "model.onnx",\n}\n', encoding="utf-8")

    missing_field = onnx_submission(HERE / "onnx-missing-field")
    data = _manifest(missing_field)
    del data["pooling"]
    _write_manifest(missing_field, data)

    wrong_pooling = onnx_submission(HERE / "onnx-wrong-pooling")
    _write_manifest(wrong_pooling, {**_manifest(wrong_pooling), "pooling": "max"})

    missing_model = onnx_submission(HERE / "onnx-missing-model")
    (missing_model / "model.onnx").unlink()

    missing_tokenizer = onnx_submission(HERE / "onnx-missing-tokenizer")
    (missing_tokenizer / "tokenizer.json").unlink()

    wrong_inputs = onnx_submission(HERE / "onnx-wrong-inputs")
    lookup_model(wrong_inputs / "model.onnx", embedding_table(), inputs=("input_ids", "pixel_values"))

    wrong_output = onnx_submission(HERE / "onnx-wrong-output")
    _write_manifest(wrong_output, {**_manifest(wrong_output), "output": "pooler_output"})

    # A Dropout left in training mode, inside an If's branch: replicas of one grade would disagree.
    dropout = onnx_submission(HERE / "onnx-random-dropout")
    then_branch = helper.make_graph(
        [helper.make_node("Dropout", ["tokens", "ratio", "training"], ["dropped"], name="drop")],
        "then",
        [],
        [helper.make_tensor_value_info("dropped", TensorProto.FLOAT, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["tokens"], ["kept"])], "else", [], [helper.make_tensor_value_info("kept", TensorProto.FLOAT, None)]
    )
    tokens_model(
        dropout / "model.onnx",
        embedding_table(),
        [helper.make_node("If", ["training"], ["last_hidden_state"], name="cond_1", then_branch=then_branch, else_branch=else_branch)],
        initializers=(
            numpy_helper.from_array(np.array(0.1, dtype=np.float32), "ratio"),
            numpy_helper.from_array(np.array(True), "training"),
        ),
    )

    # An archive whose member climbs out of the unpack folder.
    archive = HERE / "archive-dotdot"
    archive.mkdir()
    # gzip's header holds no time, so a rebuild gives the same bytes.
    with (
        gzip.GzipFile(archive / "submission.tar.gz", "wb", mtime=0) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in sorted(good.iterdir()):
            info = tar.gettarinfo(str(path), arcname=path.name)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(path, "rb") as handle:
                tar.addfile(info, handle)
        payload = b"overwrite me\n"
        info = tarfile.TarInfo("../escaped.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))

    docker = {"kind": "docker", "name": "broken", "mode": "retrieve", "training": {"setting": "zero-shot", "datasets": []}}
    for name, image in (
        ("docker-root-user", "grader-test-rootuser:1"),
        ("docker-silent", "grader-test-silent:1"),
        ("docker-scripted", "grader-test-scripted:1"),
    ):
        folder = HERE / name
        folder.mkdir()
        _write_manifest(folder, {**docker, "image": image})


if __name__ == "__main__":
    build()
