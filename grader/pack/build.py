"""``grader pack``: a model folder in, a checked ONNX submission out, or nothing at all.

Steps, all inside a temporary folder beside ``--out``:

1. read the settings (:mod:`grader.pack.config`) and load the original model;
2. export the transformer to ``model.onnx``, write ``tokenizer.json`` and ``submission.json``
   (manifest version 2: the declared training setting and datasets, and a ``model_card``
   with what the folder says: :mod:`grader.pack.card`);
3. load the result with the grader's own intake and encoder, embed a sample of
   texts (code, questions, an empty text, one longer than ``max_length``) with
   the query prefix and with the document prefix both ways, and compare each
   pair of vectors by cosine;
4. only if every cosine is at least :data:`MIN_COSINE`, rename the folder to ``--out``.

Any failure removes the temporary folder, so ``--out`` is either the whole
submission or absent.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from grader import jsonio
from grader.errors import PackError
from grader.pack.card import ModelFacts, read_model_facts
from grader.pack.config import Overrides, PackSettings, read_settings
from grader.submissions.manifest import MANIFEST_NAME, Training, load_manifest

if TYPE_CHECKING:
    from grader.pack.torch_model import OriginalModel

MIN_COSINE = 0.9999
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"

Say = Callable[[str], None]

# Texts of the kinds a code-retrieval benchmark holds; the long one is cut at max_length on both sides.
SAMPLE_TEXTS: tuple[str, ...] = (
    "def add(a, b):\n    return a + b",
    "How do I reverse a linked list in place?",
    "public static int max(int[] xs) { int m = xs[0]; for (int x : xs) if (x > m) m = x; return m; }",
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;",
    "func (s *Server) Close() error {\n\treturn s.listener.Close()\n}",
    "const sum = (xs) => xs.reduce((a, b) => a + b, 0);",
    "Return the number of non-overlapping occurrences of substring sub.",
    "x",
    "",
    "Grüße, naïve café: ünïcödé and emoji 🚀 in a docstring",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n",
    "\n".join(f"    value_{i} = compute(value_{i - 1}, factor={i}) if value_{i - 1} is not None else default_{i}" for i in range(1, 120)),
)


@dataclass(frozen=True)
class PackResult:
    """What ``grader pack`` wrote and how close the packed model is to the original."""

    out: Path
    settings: PackSettings
    min_cosine: float
    texts: int
    dimension: int
    manifest: dict[str, object]


def model_card(
    settings: PackSettings, facts: ModelFacts | None = None, *, dimension: int | None = None, parameters: int | None = None
) -> dict[str, object]:
    """The manifest's ``model_card``: what is known of the model (the folder's facts, the settings, the measured dimension)."""
    card: dict[str, object] = {}
    if facts is not None and facts.base_model is not None:
        card["base_model"] = facts.base_model.value
    if parameters:
        card["parameters"] = parameters
    if dimension:
        card["dimension"] = dimension
    card["max_length"] = settings.max_length
    card["pooling"] = settings.pooling
    if facts is not None and facts.license is not None:
        card["license"] = facts.license.value
    return card


def manifest_for(settings: PackSettings, name: str, *, training: Training | None = None, card: dict[str, object] | None = None) -> dict[str, object]:
    """The ``submission.json`` of a packed model (manifest version 2 when it has a model card)."""
    manifest: dict[str, object] = {
        "kind": "onnx",
        "name": name,
        "model": MODEL_FILE,
        "tokenizer": TOKENIZER_FILE,
        "max_length": settings.max_length,
        "pooling": settings.pooling,
        "normalize": settings.normalize,
        "output": "last_hidden_state",
    }
    if settings.query_prefix:
        manifest["query_prefix"] = settings.query_prefix
    if settings.document_prefix:
        manifest["document_prefix"] = settings.document_prefix
    if training is not None and training.setting is not None:
        manifest["training"] = {"setting": training.setting, "datasets": list(training.datasets)}
    if card:
        manifest["manifest_version"] = 2
        manifest["model_card"] = dict(card)
    return manifest


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each pair of rows (float64); a zero row against a zero row counts as 1."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    both_zero = (np.linalg.norm(a, axis=1) == 0) & (np.linalg.norm(b, axis=1) == 0)
    return np.where(both_zero, 1.0, dots / np.where(norms > 0, norms, 1.0))


def _prefixes(settings: PackSettings) -> list[tuple[str, str]]:
    sides = [("query", settings.query_prefix), ("document", settings.document_prefix)]
    return sides if settings.query_prefix != settings.document_prefix else [("query and document", settings.query_prefix)]


def pack_model(
    model_dir: str | Path,
    out: str | Path,
    *,
    overrides: Overrides = Overrides(),
    name: str | None = None,
    training: Training | None = None,
    texts: Sequence[str] = SAMPLE_TEXTS,
    say: Say = lambda line: None,
    threads: int = 1,
) -> PackResult:
    """Pack ``model_dir`` into the submission folder ``out`` (which must not exist); see the module docstring.

    ``name`` defaults to the model's own name (:func:`grader.pack.card.read_model_facts`);
    without ``training`` the manifest declares no training setting (``grader pack`` asks for one).
    """
    from grader.pack.torch_model import OriginalModel, require_extra

    out = Path(out)
    if out.exists() or out.is_symlink():
        raise PackError(f"{out} already exists; choose a new --out folder")
    settings = read_settings(Path(model_dir), overrides)
    kind = "sentence-transformers" if settings.sentence_transformers else "transformers (no modules.json)"
    say(f"read {settings.model_dir} as a {kind} folder")
    for note in settings.notes():
        say(note)
    facts = read_model_facts(settings.model_dir, settings.transformer_dir)
    for note in fact_notes(facts, name):
        say(note)
    require_extra()
    original = OriginalModel(settings)
    say(f"ONNX inputs: {', '.join(original.input_names)}; output: last_hidden_state")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.pack-", dir=out.parent))
    try:
        original.export_onnx(work / MODEL_FILE)
        tokenizer_source = original.write_tokenizer(work / TOKENIZER_FILE)
        say(f"tokenizer.json from {tokenizer_source}")
        dimension = int(original.encode(["x"], "").shape[1])
        card = model_card(settings, facts, dimension=dimension, parameters=original.parameters)
        manifest = manifest_for(settings, name or facts.name.value, training=training, card=card)
        jsonio.write_json(work / MANIFEST_NAME, manifest, mode=0o644)
        min_cosine, dimension = _compare(work, original, settings, texts, threads, say)
        if min_cosine < MIN_COSINE:
            raise PackError(
                f"the packed model's embeddings differ from the original's: smallest cosine {min_cosine:.6f} < {MIN_COSINE}; nothing written to {out}"
            )
        os.chmod(work, 0o755)  # mkdtemp made it private; a submission folder is an ordinary one
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return PackResult(out=out, settings=settings, min_cosine=min_cosine, texts=len(texts), dimension=dimension, manifest=manifest)


def fact_notes(facts: ModelFacts, name: str | None) -> list[str]:
    """One line per fact read from the folder, with its source, as :meth:`PackSettings.notes` prints the settings."""
    shown = (
        f"name = {jsonio.dumps(name, ensure_ascii=True)} (--name)"
        if name
        else f"name = {jsonio.dumps(facts.name.value, ensure_ascii=True)} ({facts.name.source})"
    )
    notes = [shown]
    for key, fact in (("base_model", facts.base_model), ("license", facts.license)):
        if fact is not None:
            notes.append(f"{key} = {jsonio.dumps(fact.value, ensure_ascii=True)} ({fact.source})")
    if facts.listed_datasets:
        listed = ", ".join(facts.listed_datasets)
        notes.append(
            f"the model card lists training data: {listed} (declare what the model was trained on with --training-dataset; "
            "data derived from the benchmark's sources makes it fine-tuned, see docs/pack.md)"
        )
    return notes


def _compare(folder: Path, original: OriginalModel, settings: PackSettings, texts: Sequence[str], threads: int, say: Say) -> tuple[float, int]:
    """Smallest cosine between the original's and the packed encoder's vectors, over every prefix side."""
    from grader.retrieval.encoder import OnnxEncoder

    manifest = load_manifest(folder)
    assert manifest.kind == "onnx"
    encoder = OnnxEncoder.load(folder, manifest, threads=threads)
    smallest = 1.0
    for side, prefix in _prefixes(settings):
        packed, _stats = encoder.encode(list(texts), prefix=prefix)
        reference = original.encode(texts, prefix)
        if reference.shape != packed.shape:
            raise PackError(f"the packed model gives vectors of shape {packed.shape}, the original {reference.shape}")
        cosines = row_cosines(reference, packed)
        worst = int(np.argmin(cosines))
        say(f"{side} side: smallest cosine {cosines[worst]:.10f} over {len(texts)} texts (text #{worst})")
        smallest = min(smallest, float(cosines[worst]))
    return smallest, encoder.dimension
