"""Intake of submissions: manifests, ONNX model checks, archives and digests.

Everything is real: archives are written with tarfile/zipfile, models with onnx
and loaded by onnxruntime, digests are recomputed with hashlib and sha256sum.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from grader.errors import SubmissionError
from grader.retrieval.encoder import OnnxEncoder
from grader.submissions.archive import ArchiveLimits, open_submission
from grader.submissions.digest import submission_digest
from grader.submissions.manifest import OnnxManifest, load_manifest
from grader.submissions.onnx_intake import inspect_onnx_model
from tests.onnx_models import embedding_table, lookup_model, onnx_submission

# --------------------------------------------------------------------------- helpers


def _rewrite_manifest(folder: Path, **changes: object) -> Path:
    """Change (or, with value ``...``, delete) fields of ``folder/submission.json``."""
    path = folder / "submission.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def _manifest_error(folder: Path) -> SubmissionError:
    with pytest.raises(SubmissionError) as info:
        load_manifest(folder)
    return info.value


def _intake_error(folder: Path) -> SubmissionError:
    manifest = load_manifest(folder)
    assert isinstance(manifest, OnnxManifest)
    with pytest.raises(SubmissionError) as info:
        inspect_onnx_model(folder, manifest)
    return info.value


def _sha256sum_digest(folder: Path) -> str:
    """The documented recipe: sha256 of ``sha256sum`` over every file, sorted by path bytes."""
    names = sorted((p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()), key=lambda n: n.encode("utf-8"))
    if shutil.which("sha256sum"):
        listing = subprocess.run(["sha256sum", "--", *names], cwd=folder, check=True, capture_output=True, env={**os.environ, "LC_ALL": "C"}).stdout
    else:  # pragma: no cover - coreutils is present on the CI images
        listing = "".join(f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  {n}\n" for n in names).encode("utf-8")
    return hashlib.sha256(listing).hexdigest()


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    """A valid ONNX submission folder with a nested extra file."""
    folder = onnx_submission(tmp_path / "sub")
    (folder / "extra").mkdir()
    (folder / "extra" / "notes.txt").write_text("trained on nothing\n", encoding="utf-8")
    (folder / "README.md").write_text("# tiny\n", encoding="utf-8")
    return folder


@pytest.fixture
def temp_area(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point tempfile at a private folder so a test can see what unpacking leaves behind."""
    area = tmp_path / "temp-area"
    area.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(area))
    return area


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _tarinfo(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def _tar_folder(folder: Path, archive: Path, *, top: str | None, mode: str = "w:gz") -> Path:
    """Pack ``folder`` (under ``top/`` or flat), with scrambled mtimes and modes."""
    with tarfile.open(archive, mode) as tar:
        for i, path in enumerate(sorted(folder.rglob("*"), reverse=True)):
            name = path.relative_to(folder).as_posix()
            info = tar.gettarinfo(str(path), arcname=f"{top}/{name}" if top else name)
            info.mtime = 1_000_000 + 7919 * i
            info.uid = info.gid = 4242
            if path.is_file():
                info.mode = 0o600
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return archive


def _zip_folder(folder: Path, archive: Path, *, top: str | None) -> Path:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(folder.rglob("*")):
            name = path.relative_to(folder).as_posix()
            bundle.write(path, f"{top}/{name}" if top else name)
    return archive


def _zip(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]], compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as bundle:
        for name, data in members:
            bundle.writestr(name, data)
    return path


def _central_directory(data: bytes) -> int:
    offset = data.find(b"PK\x01\x02")
    assert offset > 0
    return offset


# --------------------------------------------------------------------------- manifest


def test_valid_manifest_is_read_with_defaults(submission: Path) -> None:
    manifest = load_manifest(submission)
    assert manifest == OnnxManifest(
        name="tiny-lookup",
        model="model.onnx",
        tokenizer="tokenizer.json",
        max_length=16,
        pooling="mean",
        normalize=True,
        output="last_hidden_state",
        training=manifest.training,
    )
    assert manifest.training.setting == "zero-shot"
    assert (manifest.query_prefix, manifest.document_prefix) == ("", "")


def test_bad_json_names_file_and_line(submission: Path) -> None:
    path = submission / "submission.json"
    path.write_text('{\n  "kind": "onnx",\n  "name": tiny\n}\n', encoding="utf-8")
    error = _manifest_error(submission)
    assert error.line == 3
    assert str(error).startswith(f"{path}:3: ")
    assert "invalid JSON" in str(error)


def test_manifest_that_is_not_an_object(submission: Path) -> None:
    (submission / "submission.json").write_text("[1, 2]", encoding="utf-8")
    assert "JSON object" in str(_manifest_error(submission))


def test_missing_manifest(tmp_path: Path) -> None:
    tmp_path.joinpath("empty").mkdir()
    error = _manifest_error(tmp_path / "empty")
    assert "submission.json" in str(error) and str(error).startswith(str(tmp_path / "empty"))


@pytest.mark.parametrize(
    ("changes", "field", "phrase"),
    [
        ({"normalize": ...}, "/", "'normalize' is a required property"),
        ({"pooling": "max"}, "/pooling", "'max'"),
        ({"max_length": "16"}, "/max_length", "'16'"),
        ({"max_length": 0}, "/max_length", "0"),
        ({"normalize": "yes"}, "/normalize", "'yes'"),
        ({"model": "../model.onnx"}, "/model", "'../model.onnx'"),
        ({"model": "sub/../../model.onnx"}, "/model", "'sub/../../model.onnx'"),
        ({"model": "/etc/passwd"}, "/model", "'/etc/passwd'"),
        ({"tokenizer": "..\\tokenizer.json"}, "/tokenizer", "tokenizer.json"),
        ({"training": {"setting": "pre-trained"}}, "/training/setting", "'pre-trained'"),
        ({"kind": "wasm"}, "/kind", "'wasm'"),
        ({"extra_field": 1}, "/", "extra_field"),
    ],
)
def test_schema_errors_name_the_field(submission: Path, changes: dict, field: str, phrase: str) -> None:
    # A file the '..' paths would reach exists, so refusing them is the schema's doing.
    shutil.copy(submission / "model.onnx", submission.parent / "model.onnx")
    path = _rewrite_manifest(submission, **changes)
    error = _manifest_error(submission)
    assert error.field == field
    assert str(error).startswith(f"{path}: {field}: ")
    assert phrase in str(error)


@pytest.mark.parametrize("key", ["model", "tokenizer"])
def test_named_file_must_exist(submission: Path, key: str) -> None:
    named = submission / f"{key}.{'onnx' if key == 'model' else 'json'}"
    named.unlink()
    error = _manifest_error(submission)
    assert error.field == f"/{key}"
    assert str(error).startswith(f"{submission / 'submission.json'}: /{key}: ")


def test_named_file_must_be_a_regular_file_not_a_folder_or_link(submission: Path) -> None:
    (submission / "weights").mkdir()
    _rewrite_manifest(submission, model="weights")
    assert _manifest_error(submission).field == "/model"
    os.symlink(submission / "model.onnx", submission / "link.onnx")
    _rewrite_manifest(submission, model="link.onnx")
    assert _manifest_error(submission).field == "/model"


# --------------------------------------------------------------------------- ONNX intake


def test_good_model_passes_intake(submission: Path) -> None:
    info = inspect_onnx_model(submission, load_manifest(submission))
    assert info.inputs == ("input_ids", "attention_mask")
    assert (info.output, info.output_rank, info.dimension, info.opset) == ("last_hidden_state", 3, 8, 17)


def test_unknown_model_input_is_refused(submission: Path) -> None:
    lookup_model(submission / "model.onnx", embedding_table(), inputs=("input_ids", "pixel_values"))
    error = _intake_error(submission)
    assert error.field == "inputs"
    assert "'pixel_values'" in str(error)
    assert str(error).startswith(f"{submission / 'model.onnx'}: inputs: ")


def test_model_without_input_ids_is_refused(submission: Path) -> None:
    lookup_model(submission / "model.onnx", embedding_table(), inputs=("attention_mask",), ids_input="attention_mask")
    error = _intake_error(submission)
    assert error.field == "inputs"
    assert "'input_ids'" in str(error)


def test_custom_operator_domain_is_refused_before_onnxruntime(submission: Path) -> None:
    lookup_model(submission / "model.onnx", embedding_table(), domain="evil.ops")
    error = _intake_error(submission)
    assert error.field == "opset_import"
    assert "'evil.ops'" in str(error)
    with pytest.raises(SubmissionError, match="evil.ops"):
        OnnxEncoder.load(submission, load_manifest(submission), threads=1)


def test_output_not_in_model_names_the_manifest_field(submission: Path) -> None:
    path = _rewrite_manifest(submission, output="pooler_output")
    error = _intake_error(submission)
    assert error.field == "/output"
    assert str(error).startswith(f"{path}: /output: ")
    assert "'pooler_output'" in str(error) and "last_hidden_state" in str(error)


@pytest.mark.parametrize(("pooled", "pooling", "rank"), [(True, "mean", 2), (True, "cls", 2), (False, "none", 3)])
def test_output_rank_must_fit_pooling(tmp_path: Path, pooled: bool, pooling: str, rank: int) -> None:
    folder = onnx_submission(tmp_path / "sub", pooled=pooled, manifest={"pooling": pooling})
    error = _intake_error(folder)
    assert error.field == "/pooling"
    assert str(error).startswith(f"{folder / 'submission.json'}: /pooling: ")
    assert f"rank {rank}" in str(error)


def test_unreadable_model_file(submission: Path) -> None:
    (submission / "model.onnx").write_bytes(b"\x08\x96\x01 this is not protobuf \xff\xff\xff")
    error = _intake_error(submission)
    assert "not a readable ONNX model" in str(error)
    assert str(error).startswith(str(submission / "model.onnx"))


@pytest.mark.parametrize("input_type", [TensorProto.FLOAT, TensorProto.STRING])
def test_non_integer_input_type_is_refused(submission: Path, input_type: int) -> None:
    lookup_model(submission / "model.onnx", embedding_table(), input_type=input_type)  # cast to int64 inside
    with pytest.raises(SubmissionError, match="int64 or int32"):
        OnnxEncoder.load(submission, load_manifest(submission), threads=1)


def test_int32_inputs_are_fed_as_int32(tmp_path: Path) -> None:
    table = embedding_table()
    wide = onnx_submission(tmp_path / "int64", table=table)
    narrow = onnx_submission(tmp_path / "int32", table=table)
    lookup_model(narrow / "model.onnx", table, input_type=TensorProto.INT32)
    texts = ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9"]
    expected, _ = OnnxEncoder.load(wide, load_manifest(wide), threads=1).encode(texts)
    got, _ = OnnxEncoder.load(narrow, load_manifest(narrow), threads=1).encode(texts)
    assert got.tobytes() == expected.tobytes()


def _externalise(folder: Path, location: str = "weights.bin") -> None:
    model = onnx.load(str(folder / "model.onnx"))
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0)


def _set_location(folder: Path, location: str) -> None:
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    changed = 0
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
                changed += 1
    assert changed == 1
    onnx.save(model, str(folder / "model.onnx"))


def test_external_data_inside_the_submission_is_accepted(tmp_path: Path) -> None:
    table = embedding_table()
    plain = onnx_submission(tmp_path / "plain", table=table)
    external = onnx_submission(tmp_path / "external", table=table)
    _externalise(external)
    assert (external / "weights.bin").stat().st_size == table.nbytes
    assert (external / "model.onnx").stat().st_size < table.nbytes
    texts = ["w3 w4", "w9 w10 w11"]
    expected, _ = OnnxEncoder.load(plain, load_manifest(plain), threads=1).encode(texts)
    got, _ = OnnxEncoder.load(external, load_manifest(external), threads=1).encode(texts)
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("location", ["../weights.bin", "data/../../weights.bin", "ABSOLUTE", "data\\..\\..\\weights.bin"])
def test_external_data_outside_the_submission_is_refused(tmp_path: Path, location: str) -> None:
    folder = onnx_submission(tmp_path / "sub")
    _externalise(folder)
    shutil.move(folder / "weights.bin", tmp_path / "weights.bin")
    if location == "ABSOLUTE":
        location = str(tmp_path / "weights.bin")
    _set_location(folder, location)
    error = _intake_error(folder)
    assert error.field == "external_data"
    assert str(error).startswith(f"{folder / 'model.onnx'}: external_data: ")
    assert "'table'" in str(error)
    with pytest.raises(SubmissionError, match="external_data"):
        OnnxEncoder.load(folder, load_manifest(folder), threads=1)


def test_external_data_through_a_link_or_missing_file_is_refused(tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "sub")
    _externalise(folder)
    shutil.move(folder / "weights.bin", tmp_path / "weights.bin")
    os.symlink(tmp_path / "weights.bin", folder / "weights.bin")
    assert _intake_error(folder).field == "external_data"
    (folder / "weights.bin").unlink()
    assert "not a regular file inside the submission" in str(_intake_error(folder))


def test_external_data_of_a_sparse_constant_outside_is_refused(tmp_path: Path) -> None:
    """Tensors hide in sparse attributes too, not only in initializers."""
    folder = onnx_submission(tmp_path / "sub")
    table = embedding_table()
    (tmp_path / "secret.bin").write_bytes(table.reshape(-1).tobytes())
    values = numpy_helper.from_array(table.reshape(-1), "values")
    indices = numpy_helper.from_array(np.arange(table.size, dtype=np.int64), "indices")
    sparse = helper.make_sparse_tensor(values, indices, list(table.shape))
    sparse.values.ClearField("raw_data")
    sparse.values.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../secret.bin"), ("offset", "0"), ("length", str(table.nbytes))):
        entry = sparse.values.external_data.add()
        entry.key, entry.value = key, value
    nodes = [
        helper.make_node("Constant", [], ["table"], sparse_value=sparse),
        helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "sparse",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    error = _intake_error(folder)
    assert error.field == "external_data"
    assert "'../secret.bin'" in str(error)


# --------------------------------------------------------------------------- archives and digests


@pytest.mark.slow
def test_folder_digest_is_the_sha256sum_recipe(submission: Path) -> None:
    digest = submission_digest(submission)
    assert digest == _sha256sum_digest(submission)
    (submission / "README.md").write_text("# tiny!\n", encoding="utf-8")
    assert submission_digest(submission) != digest
    assert submission_digest(submission) == _sha256sum_digest(submission)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "pack"),
    [
        ("sub.tar.gz", lambda f, a: _tar_folder(f, a, top="my-model")),
        ("sub.tgz", lambda f, a: _tar_folder(f, a, top=None)),
        ("sub.tar", lambda f, a: _tar_folder(f, a, top="x", mode="w")),
        ("SUB.TAR.GZ", lambda f, a: _tar_folder(f, a, top=None)),
        ("sub.zip", lambda f, a: _zip_folder(f, a, top="my-model")),
        ("sub.zip", lambda f, a: _zip_folder(f, a, top=None)),
    ],
)
def test_archives_unpack_to_the_folder_with_the_same_digest(submission: Path, tmp_path: Path, temp_area: Path, name: str, pack) -> None:
    archive = pack(submission, tmp_path / name)
    with open_submission(submission) as folder:
        assert folder == submission
        expected = submission_digest(folder)
    with open_submission(archive) as folder:
        assert folder.is_relative_to(temp_area)
        assert (folder / "submission.json").is_file()
        assert submission_digest(folder) == expected == _sha256sum_digest(submission)
        manifest = load_manifest(folder)
        encoder = OnnxEncoder.load(folder, manifest, threads=1)
        assert encoder.dimension == 8
    assert list(temp_area.iterdir()) == []


def test_archive_is_removed_even_when_the_body_fails(submission: Path, tmp_path: Path, temp_area: Path) -> None:
    archive = _zip_folder(submission, tmp_path / "sub.zip", top=None)
    with pytest.raises(RuntimeError, match="boom"), open_submission(archive):
        raise RuntimeError("boom")
    assert list(temp_area.iterdir()) == []


def _bad_tars() -> dict[str, tuple[list, ArchiveLimits, str]]:
    ok = (_tarinfo("submission.json"), b"{}")
    dev = _tarinfo("dev", tarfile.CHRTYPE)
    dev.devmajor, dev.devminor = 1, 3
    return {
        "dotdot": ([ok, (_tarinfo("model/../../evil.txt"), b"x")], ArchiveLimits(), "'..'"),
        "absolute": ([ok, (_tarinfo("/tmp/evil.txt"), b"x")], ArchiveLimits(), "absolute"),
        "backslash": ([ok, (_tarinfo("..\\evil.txt"), b"x")], ArchiveLimits(), "Windows"),
        "symlink": ([ok, (_tarinfo("model.onnx", tarfile.SYMTYPE, "/etc/passwd"), None)], ArchiveLimits(), "link"),
        "hardlink": ([ok, (_tarinfo("model.onnx", tarfile.LNKTYPE, "submission.json"), None)], ArchiveLimits(), "link"),
        "device": ([ok, (dev, None)], ArchiveLimits(), "not a regular file"),
        "fifo": ([ok, (_tarinfo("pipe", tarfile.FIFOTYPE), None)], ArchiveLimits(), "not a regular file"),
        "too-many": ([ok] + [(_tarinfo(f"f{i}.txt"), b"") for i in range(3)], ArchiveLimits(max_files=3), "more than 3 entries"),
        "too-many-folders": ([(_tarinfo(f"d{i}", tarfile.DIRTYPE), None) for i in range(4)], ArchiveLimits(max_files=3), "more than 3 entries"),
        "too-large": (
            [ok, (_tarinfo("a.bin"), b"a" * 60), (_tarinfo("b.bin"), b"b" * 60)],
            ArchiveLimits(max_total_bytes=100),
            "more than 100 bytes",
        ),
        "duplicate": ([ok, ok], ArchiveLimits(), "not a readable tar archive"),
    }


@pytest.mark.parametrize("case", sorted(_bad_tars()))
@pytest.mark.parametrize("mode", ["w:gz", "w"])
def test_bad_tar_members_are_refused_and_nothing_is_left(tmp_path: Path, temp_area: Path, case: str, mode: str) -> None:
    members, limits, phrase = _bad_tars()[case]
    archive = _tar(tmp_path / ("bad.tar.gz" if mode == "w:gz" else "bad.tar"), members, mode)
    with pytest.raises(SubmissionError) as info, open_submission(archive, limits):
        pytest.fail("a bad archive was opened")
    assert str(info.value).startswith(f"{archive}: ")
    assert phrase in str(info.value)
    assert list(temp_area.iterdir()) == []
    assert not (tmp_path / "evil.txt").exists()


def test_tar_limits_are_inclusive(tmp_path: Path, temp_area: Path) -> None:
    members = [(_tarinfo("submission.json"), b"{}"), (_tarinfo("a.bin"), b"a" * 98)]
    archive = _tar(tmp_path / "ok.tar.gz", members)
    with open_submission(archive, ArchiveLimits(max_total_bytes=100, max_files=2)) as folder:
        assert (folder / "a.bin").read_bytes() == b"a" * 98
    assert list(temp_area.iterdir()) == []


def _symlink_zip_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = 0o120777 << 16
    return info


def _bad_zips(tmp_path: Path) -> dict[str, tuple[Path, ArchiveLimits, str]]:
    ok = ("submission.json", b"{}")
    cases = {
        "dotdot": ([ok, ("model/../../evil.txt", b"x")], ArchiveLimits(), "'..'"),
        "absolute": ([ok, ("/tmp/evil.txt", b"x")], ArchiveLimits(), "absolute"),
        "backslash": ([ok, ("..\\evil.txt", b"x")], ArchiveLimits(), "Windows"),
        "symlink": ([ok, (_symlink_zip_info("model.onnx"), b"/etc/passwd")], ArchiveLimits(), "link"),
        "too-many": ([ok] + [(f"f{i}.txt", b"") for i in range(3)], ArchiveLimits(max_files=3), "more than 3 entries"),
        "too-large": ([ok, ("a.bin", b"a" * 60), ("b.bin", b"b" * 60)], ArchiveLimits(max_total_bytes=100), "more than 100 bytes"),
    }
    out = {name: (_zip(tmp_path / f"{name}.zip", members), limits, phrase) for name, (members, limits, phrase) in cases.items()}

    # A header that understates the size (a zip bomb's trick): refused, never trusted.
    forged = _zip(tmp_path / "forged.zip", [("submission.json", b"{" + b" " * 100_000 + b"}")], zipfile.ZIP_DEFLATED)
    data = bytearray(forged.read_bytes())
    directory = _central_directory(data)
    data[directory + 24 : directory + 28] = struct.pack("<I", 10)
    forged.write_bytes(bytes(data))
    out["forged-size"] = (forged, ArchiveLimits(max_total_bytes=1000), "")

    # Damaged or unsupported members must be SubmissionErrors, not crashes.
    corrupt = _zip(tmp_path / "corrupt.zip", [("submission.json", b"hello world " * 5000)], zipfile.ZIP_DEFLATED)
    data = bytearray(corrupt.read_bytes())
    start = 30 + len("submission.json")
    data[start : start + 30] = bytes(range(200, 230))
    corrupt.write_bytes(bytes(data))
    out["corrupt-deflate"] = (corrupt, ArchiveLimits(), "not a readable zip archive")

    encrypted = _zip(tmp_path / "encrypted.zip", [ok])
    data = bytearray(encrypted.read_bytes())
    data[_central_directory(data) + 8] |= 0x01
    encrypted.write_bytes(bytes(data))
    out["encrypted"] = (encrypted, ArchiveLimits(), "not a readable zip archive")

    method = _zip(tmp_path / "method.zip", [ok])
    data = bytearray(method.read_bytes())
    directory = _central_directory(data)
    data[directory + 10 : directory + 12] = struct.pack("<H", 99)
    method.write_bytes(bytes(data))
    out["unknown-method"] = (method, ArchiveLimits(), "not a readable zip archive")

    utf8 = _zip(tmp_path / "utf8.zip", [("submission.jsoné", b"{}")])
    data = bytearray(utf8.read_bytes())
    data[data.find("é".encode(), _central_directory(data))] = 0xFF
    utf8.write_bytes(bytes(data))
    out["bad-utf8-name"] = (utf8, ArchiveLimits(), "not a readable zip archive")

    not_zip = tmp_path / "garbage.zip"
    not_zip.write_bytes(b"this is not a zip file at all")
    out["not-a-zip"] = (not_zip, ArchiveLimits(), "not a readable zip archive")
    return out


BAD_ZIPS = [
    "dotdot",
    "absolute",
    "backslash",
    "symlink",
    "too-many",
    "too-large",
    "forged-size",
    "corrupt-deflate",
    "encrypted",
    "unknown-method",
    "bad-utf8-name",
    "not-a-zip",
]


@pytest.mark.parametrize("case", BAD_ZIPS)
def test_bad_zip_members_are_refused_and_nothing_is_left(tmp_path: Path, temp_area: Path, case: str) -> None:
    archive, limits, phrase = _bad_zips(tmp_path)[case]
    with pytest.raises(SubmissionError) as info, open_submission(archive, limits):
        pytest.fail("a bad archive was opened")
    assert str(info.value).startswith(f"{archive}: ")
    assert phrase in str(info.value)
    assert list(temp_area.iterdir()) == []
    assert not (tmp_path / "evil.txt").exists()


def test_symlink_inside_a_folder_submission_is_refused(submission: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("secret", encoding="utf-8")
    os.symlink(tmp_path / "outside.txt", submission / "extra" / "peek.txt")
    with pytest.raises(SubmissionError) as info, open_submission(submission):
        pytest.fail("a folder with a link was opened")
    assert str(info.value).startswith(f"{submission / 'extra' / 'peek.txt'}: ")
    assert "symbolic links" in str(info.value)


def test_dangling_symlink_to_a_folder_inside_is_refused(submission: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path, submission / "up", target_is_directory=True)
    with pytest.raises(SubmissionError, match="symbolic links"), open_submission(submission):
        pass


def test_submission_that_is_a_link_or_missing_or_unknown(submission: Path, tmp_path: Path) -> None:
    os.symlink(submission, tmp_path / "link")
    with pytest.raises(SubmissionError, match="symbolic link"), open_submission(tmp_path / "link"):
        pass
    with pytest.raises(SubmissionError, match="not found"), open_submission(tmp_path / "nope.tar.gz"):
        pass
    (tmp_path / "model.rar").write_bytes(b"Rar!")
    with pytest.raises(SubmissionError, match=r"\.zip"), open_submission(tmp_path / "model.rar"):
        pass
