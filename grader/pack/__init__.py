"""``grader pack``: turn a sentence-transformers (or transformers) model folder into a checked ONNX submission.

:mod:`grader.pack.config` reads the folder's settings (no torch needed);
:mod:`grader.pack.torch_model` loads, exports and runs the original model (the
``pack`` extra); :mod:`grader.pack.build` writes the submission atomically after
comparing both encoders. See ``docs/pack.md``.
"""

from grader.pack.build import MIN_COSINE, SAMPLE_TEXTS, PackResult, manifest_for, pack_model, row_cosines
from grader.pack.config import Overrides, PackSettings, read_settings

__all__ = ["MIN_COSINE", "SAMPLE_TEXTS", "Overrides", "PackResult", "PackSettings", "manifest_for", "pack_model", "read_settings", "row_cosines"]
