"""The submission manifest (``submission.json``): reading and validating it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from grader import jsonio
from grader.errors import SubmissionError
from grader.schemas import first_error, json_pointer
from grader.text import first_unprintable

MANIFEST_NAME = "submission.json"
MAX_MANIFEST_BYTES = 1 << 20
#: Largest ``tokenizer.json`` accepted. Real ones are 0.5-20 MB (multilingual vocabularies
#: included); the tokenizers library needs about 9x a file's size in memory to load it.
MAX_TOKENIZER_BYTES = 64 << 20
#: Most ``training.datasets`` labels, and longest label (the schema says the same; the board shows them all).
MAX_DATASETS = 50
MAX_DATASET_CHARS = 200


@dataclass(frozen=True)
class Training:
    """The training setting a submitter declares (reported next to the numbers)."""

    setting: Literal["zero-shot", "fine-tuned"] | None = None
    datasets: tuple[str, ...] = ()

    def as_labels(self) -> dict[str, Any]:
        return {"training": {"setting": self.setting, "datasets": list(self.datasets)}} if self.setting else {}


@dataclass(frozen=True)
class OnnxManifest:
    """An ONNX encoder submission."""

    name: str
    model: str
    tokenizer: str
    max_length: int
    pooling: Literal["mean", "cls", "none"]
    normalize: bool
    query_prefix: str = ""
    document_prefix: str = ""
    output: str = "last_hidden_state"
    training: Training = field(default_factory=Training)
    #: manifest_version 2: declared model facts (parameters, dimension, max_length, license, revision)
    model_card: dict[str, Any] = field(default_factory=dict)
    kind: Literal["onnx"] = "onnx"


@dataclass(frozen=True)
class DockerManifest:
    """A Docker image submission."""

    name: str
    image: str
    mode: Literal["retrieve", "encode", "translate"]
    query_prefix: str = ""
    document_prefix: str = ""
    training: Training = field(default_factory=Training)
    model_card: dict[str, Any] = field(default_factory=dict)
    kind: Literal["docker"] = "docker"


Manifest = OnnxManifest | DockerManifest


def _shown_text(data: dict[str, Any]) -> list[tuple[str, Any]]:
    """(JSON pointer, value) of each field shown to people: the name, the training datasets, the model card's text."""
    fields: list[tuple[str, Any]] = [("/name", data.get("name"))]
    training = data.get("training")
    if isinstance(training, dict) and isinstance(training.get("datasets"), list):
        fields += [(f"/training/datasets/{n}", value) for n, value in enumerate(training["datasets"][: MAX_DATASETS + 1])]
    card = data.get("model_card")
    if isinstance(card, dict):
        fields += [(f"/model_card/{key}", value) for key, value in card.items()]
    return fields


def _refuse_unprintable(data: dict[str, Any], path: Path) -> None:
    """Refuse, in one line naming the field and the character, text a terminal or page would render as control."""
    for pointer, value in _shown_text(data):
        found = first_unprintable(value) if isinstance(value, str) else None
        if found is not None:
            raise SubmissionError(
                f"holds the non-printable character {found} (control, bidi, zero-width or format characters are refused in shown text)",
                path=path,
                field=pointer,
            )


def load_manifest(folder: Path) -> Manifest:
    """Read, schema-validate and check ``folder/submission.json``.

    Errors name the file and the JSON pointer of the offending field; files the
    manifest names must exist inside the folder as regular files.
    """
    path = folder / MANIFEST_NAME
    if not path.is_file() or path.is_symlink():
        raise SubmissionError(f"missing {MANIFEST_NAME} at the submission's root", path=folder)
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise SubmissionError(f"larger than {MAX_MANIFEST_BYTES} bytes", path=path)
    try:
        data = jsonio.load_file(path, max_bytes=MAX_MANIFEST_BYTES)
    except jsonio.JsonError as failure:
        failure.raise_as(SubmissionError, path=path)
    if not isinstance(data, dict):
        raise SubmissionError("expected a JSON object", path=path)
    _refuse_unprintable(data, path)
    error = first_error("submission", data)
    if error is not None:
        raise SubmissionError(error.message, path=path, field=json_pointer(error))
    training_data = data.get("training") or {}
    training = Training(training_data.get("setting"), tuple(training_data.get("datasets", ())))
    if data["kind"] == "onnx":
        for key in ("model", "tokenizer"):
            target = folder / data[key]
            if not target.is_file() or target.is_symlink():
                raise SubmissionError(f"names {data[key]!r}, which is not a file in the submission", path=path, field=f"/{key}")
        tokenizer_size = (folder / data["tokenizer"]).stat().st_size
        if tokenizer_size > MAX_TOKENIZER_BYTES:
            raise SubmissionError(
                f"{data['tokenizer']!r} is {tokenizer_size} bytes, over the {MAX_TOKENIZER_BYTES}-byte ({MAX_TOKENIZER_BYTES >> 20} MiB) limit for a tokenizer",
                path=path,
                field="/tokenizer",
            )
        return OnnxManifest(
            name=data["name"],
            model=data["model"],
            tokenizer=data["tokenizer"],
            max_length=data["max_length"],
            pooling=data["pooling"],
            normalize=data["normalize"],
            query_prefix=data.get("query_prefix", ""),
            document_prefix=data.get("document_prefix", ""),
            output=data.get("output", "last_hidden_state"),
            training=training,
            model_card=dict(data.get("model_card", {})),
        )
    return DockerManifest(
        name=data["name"],
        image=data["image"],
        mode=data["mode"],
        query_prefix=data.get("query_prefix", ""),
        document_prefix=data.get("document_prefix", ""),
        training=training,
        model_card=dict(data.get("model_card", {})),
    )
