"""``grader pack``: turn a sentence-transformers (or transformers) model folder into a checked ONNX submission.

:mod:`grader.pack.config` reads the folder's settings and :mod:`grader.pack.card`
the model's own facts (name, base model, licence), neither needing torch;
:mod:`grader.pack.torch_model` loads, exports and runs the original model (the
``pack`` extra); :mod:`grader.pack.build` writes the submission atomically after
comparing both encoders. See ``docs/pack.md``.
"""

from grader.pack.build import MIN_COSINE, SAMPLE_TEXTS, PackResult, manifest_for, model_card, pack_model, row_cosines
from grader.pack.card import ModelFacts, read_model_facts
from grader.pack.config import Overrides, PackSettings, read_settings

__all__ = [
    "MIN_COSINE",
    "SAMPLE_TEXTS",
    "ModelFacts",
    "Overrides",
    "PackResult",
    "PackSettings",
    "manifest_for",
    "model_card",
    "pack_model",
    "read_model_facts",
    "read_settings",
    "row_cosines",
]
