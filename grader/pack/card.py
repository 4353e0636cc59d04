"""What a model folder says about the model itself: its name, base model, licence and listed training data.

These facts go into the submission's ``name`` and ``model_card`` (manifest version 2),
each with where it was read, so ``grader pack`` can print its sources:

* name: the README model card's ``model_name`` or first heading (``# all-MiniLM-L6-v2``),
  else the folder's name unless it is a generic one such as ``model`` (what a
  package that ships a model calls its folder), else the hub id in ``config.json``
  ``_name_or_path`` (which for a model trained and saved locally is its base model,
  hence last);
* base model: the README's ``base_model``, else ``_name_or_path`` when it names
  another model than the name (transformers records there the checkpoint the
  weights were loaded from before they were trained and saved);
* licence: the README's ``license`` (``license_name`` when that is ``other``);
* training datasets the README lists: only printed, never declared for the
  participant, who says what the model was trained on (``--training-dataset``).

A README model card starts with YAML front matter between ``---`` lines; only
its top-level ``key: value`` and list entries are read (no YAML library needed).
Nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.errors import PackError

README_FILE = "README.md"
#: Bytes of a README read: model cards' front matter and first heading sit at the top.
MAX_README_BYTES = 256 * 1024
MAX_FACT_CHARS = 200
#: A hub id: ``name`` or ``owner/name`` (what ``_name_or_path`` holds when a model came from the hub, not a local path).
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
#: Headings of generated model cards that are not a name.
_GENERIC_HEADING = re.compile(r"^(?:SentenceTransformer\b|Model Card\b|Model card\b|Usage\b)", re.IGNORECASE)
_CARD_PREFIX = re.compile(r"^Model Card for\s+", re.IGNORECASE)
#: Folder names that say nothing about the model.
GENERIC_FOLDER_NAMES = frozenset({"model", "models", "checkpoint", "output", "outputs", "final", "best", "snapshot", "weights"})


@dataclass(frozen=True)
class Fact:
    """One value and where it was read."""

    value: str
    source: str


@dataclass(frozen=True)
class ModelFacts:
    """What the folder says about the model (None: it does not say)."""

    name: Fact
    base_model: Fact | None = None
    license: Fact | None = None
    listed_datasets: tuple[str, ...] = ()


def front_matter(text: str) -> dict[str, Any]:
    """Top-level keys of a README's YAML front matter: scalars as strings, lists (block ``- x`` or inline ``[x, y]``) as lists of strings."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    found: dict[str, Any] = {}
    key: str | None = None
    for line in lines[1:]:
        if line.strip() in ("---", "..."):
            return found
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith((" ", "\t", "-")):
            item = line.strip()
            if key is not None and item.startswith("- ") and isinstance(found.get(key), list):
                found[key].append(_scalar(item[2:]))
            continue
        name, colon, rest = line.partition(":")
        if not colon:
            key = None
            continue
        key, rest = name.strip(), rest.strip()
        if not rest:
            found[key] = []
        elif rest.startswith("[") and rest.endswith("]"):
            found[key] = [_scalar(part) for part in rest[1:-1].split(",") if part.strip()]
        else:
            found[key] = _scalar(rest)
    return {}  # no closing line: not front matter


def _scalar(text: str) -> str:
    text = text.split(" #", 1)[0].strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text


def _clean(value: Any) -> str | None:
    """A short printable one-line string, or None."""
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    if not isinstance(value, str):
        return None
    value = " ".join(value.split())
    if not value or len(value) > MAX_FACT_CHARS or any(ord(c) < 32 for c in value):
        return None
    return value


def _first_heading(text: str) -> str | None:
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("# "):
            heading = _CARD_PREFIX.sub("", line[2:].strip())
            return None if _GENERIC_HEADING.match(heading) else _clean(heading)
    return None


def _read_readme(model_dir: Path) -> str:
    path = model_dir / README_FILE
    if not path.is_file() or path.is_symlink():
        return ""
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_README_BYTES).decode("utf-8", "replace")
    except OSError as error:
        raise PackError(f"{path}: cannot read: {error}") from None


def _name_or_path(transformer_dir: Path) -> str | None:
    path = transformer_dir / "config.json"
    try:
        config = jsonio.load_file(path)
    except (jsonio.JsonError, OSError):
        return None  # config.py has read it already and says what is wrong with it
    value = _clean(config.get("_name_or_path")) if isinstance(config, dict) else None
    return value if value is not None and _HUB_ID.match(value) else None


def _short(model_id: str) -> str:
    return model_id.rsplit("/", 1)[-1].lower()


def read_model_facts(model_dir: Path, transformer_dir: Path | None = None) -> ModelFacts:
    """The model's name, base model, licence and listed training datasets, each with its source."""
    model_dir = Path(model_dir)
    transformer_dir = model_dir if transformer_dir is None else Path(transformer_dir)
    readme_path = model_dir / README_FILE
    text = _read_readme(model_dir)
    meta = front_matter(text)
    hub_id = _name_or_path(transformer_dir)
    config_source = f"{transformer_dir / 'config.json'}: _name_or_path"

    name: Fact | None = None
    for key in ("model_name", "model_id"):
        value = _clean(meta.get(key))
        if value is not None:
            name = Fact(value, f"{readme_path}: {key}")
            break
    if name is None and (heading := _first_heading(text)) is not None:
        name = Fact(heading, f"{readme_path}: first heading")
    base: Fact | None = None
    base_value = _clean(meta.get("base_model"))
    if base_value is not None:
        base = Fact(base_value, f"{readme_path}: base_model")
    folder = model_dir.resolve().name
    generic_folder = folder.lower() in GENERIC_FOLDER_NAMES
    if name is None and not generic_folder:
        name = Fact(folder, "the folder's name")
    if name is None and hub_id is not None and (base is None or _short(base.value) != _short(hub_id)):
        name = Fact(hub_id, config_source)
    if name is None:
        name = Fact(folder, "the folder's name, a generic one: give --name")
    if base is None and hub_id is not None and _short(hub_id) != _short(name.value):
        base = Fact(hub_id, config_source)

    licence: Fact | None = None
    licence_value = _clean(meta.get("license"))
    if licence_value == "other" and _clean(meta.get("license_name")) is not None:
        licence = Fact(str(_clean(meta.get("license_name"))), f"{readme_path}: license_name")
    elif licence_value is not None:
        licence = Fact(licence_value, f"{readme_path}: license")
    raw = meta.get("datasets")
    listed = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else []
    datasets = tuple(d for d in (_clean(x) for x in listed) if d is not None)
    return ModelFacts(name=name, base_model=base, license=licence, listed_datasets=datasets)
