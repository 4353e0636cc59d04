"""The torch side of ``grader pack``: load the original model, export its transformer, embed with it.

Everything here needs the ``pack`` extra (torch, transformers, sentence-transformers);
:func:`require_extra` turns a missing one into one line saying how to install it.
Models are only read from the local folder (``local_files_only``, hub offline):
nothing is downloaded.
"""

from __future__ import annotations

import importlib
import inspect
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grader.errors import PackError
from grader.pack.config import PackSettings

#: ONNX opset of the export: TorchScript exporter, supported by every onnxruntime the grader accepts (>= 1.18).
OPSET = 17
FED_ORDER = ("input_ids", "attention_mask", "token_type_ids")
INSTALL_HINT = "pip install torch==2.13.0 (the CPU wheel), then pip install -e '.[pack]'"


def require_extra() -> None:
    """Import the ``pack`` extra's packages, or raise one line saying how to install them."""
    for module in ("torch", "transformers", "sentence_transformers"):
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise PackError(f"grader pack needs the 'pack' extra ({module} is missing: {error.msg})", hint=INSTALL_HINT) from None


class OriginalModel:
    """The model as its authors run it: sentence-transformers, or transformers plus the chosen pooling."""

    def __init__(self, settings: PackSettings) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # no "Loading weights" bars on stderr

        self.settings = settings
        self._torch = torch
        try:
            if settings.sentence_transformers:
                from sentence_transformers import SentenceTransformer

                self.st: Any = SentenceTransformer(str(settings.model_dir), device="cpu", local_files_only=True)
                self.st.max_seq_length = settings.max_length
                self.transformer: Any = self.st[0].auto_model
                self.tokenizer = self.st.tokenizer
            else:
                self.st = None
                self.transformer = AutoModel.from_pretrained(str(settings.transformer_dir), local_files_only=True)
                self.tokenizer = AutoTokenizer.from_pretrained(str(settings.transformer_dir), local_files_only=True, use_fast=True)
        except (OSError, ValueError, KeyError) as error:
            raise PackError(f"{settings.model_dir}: cannot load the model: {' '.join(str(error).split())[:300]}") from None
        self.transformer = self.transformer.float().eval()
        if not getattr(self.tokenizer, "is_fast", False):
            raise PackError(f"{settings.transformer_dir}: the tokenizer has no fast (tokenizers) version; the grader needs a tokenizer.json")
        accepted = set(inspect.signature(self.transformer.forward).parameters)
        names = set(self.tokenizer.model_input_names) & accepted
        self.input_names = [name for name in FED_ORDER if name in names or name == "input_ids"]

    @property
    def parameters(self) -> int:
        """Number of parameters of the transformer (what the ONNX export holds; pooling and normalising have none)."""
        return int(sum(p.numel() for p in self.transformer.parameters()))

    def write_tokenizer(self, path: Path) -> str:
        """Copy the folder's tokenizer.json, or save the fast tokenizer's; returns where it came from."""
        source = self.settings.transformer_dir / "tokenizer.json"
        if source.is_file():
            path.write_bytes(source.read_bytes())
            return str(source)
        self.tokenizer.backend_tokenizer.save(str(path))
        return f"{self.settings.transformer_dir} (saved from the fast tokenizer; the folder has no tokenizer.json)"

    def export_onnx(self, path: Path) -> None:
        """``torch.onnx.export`` of the transformer: the fed inputs in, ``last_hidden_state`` out, batch and sequence dynamic."""
        import torch

        names = list(self.input_names)
        transformer = self.transformer

        class LastHiddenState(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.transformer = transformer

            def forward(self, *tensors: Any) -> Any:
                return self.transformer(**dict(zip(names, tensors)), return_dict=False)[0]

        example = self.tokenizer(["def add(a, b):\n    return a + b", "x"], padding=True, return_tensors="pt")
        axes = {0: "batch", 1: "sequence"}
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # tracer and deprecation chatter
                torch.onnx.export(
                    LastHiddenState().eval(),
                    tuple(example[name] for name in names),
                    str(path),
                    dynamo=False,
                    input_names=names,
                    output_names=["last_hidden_state"],
                    dynamic_axes={**{name: axes for name in names}, "last_hidden_state": axes},
                    opset_version=OPSET,
                    do_constant_folding=True,
                )
        except Exception as error:  # torch's exporter raises many kinds
            raise PackError(f"torch.onnx.export failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}") from None

    def encode(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        """Embeddings of ``prefix + text`` as the original model computes them (float64)."""
        torch = self._torch
        if self.st is not None:
            # prompt="" is no prompt at all (not the default prompt), as the packed side does.
            vectors = self.st.encode(list(texts), prompt=prefix, batch_size=8, convert_to_numpy=True, show_progress_bar=False)
            return np.asarray(vectors, dtype=np.float64)
        out = []
        with torch.no_grad():
            for begin in range(0, len(texts), 8):
                batch = [prefix + text for text in texts[begin : begin + 8]]
                features = self.tokenizer(batch, padding=True, truncation=True, max_length=self.settings.max_length, return_tensors="pt")
                hidden = self.transformer(**{name: features[name] for name in self.input_names}, return_dict=False)[0]
                if self.settings.pooling == "cls":
                    pooled = hidden[:, 0]
                else:
                    mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                if self.settings.normalize:
                    pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out.append(pooled.double().numpy())
        return np.concatenate(out) if out else np.empty((0, 0))
