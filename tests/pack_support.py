"""Helpers of the `grader pack` tests: sentence-transformers-shaped model folders written by hand."""

from __future__ import annotations

import json
from pathlib import Path

#: The module path prefix of sentence-transformers' modules in modules.json.
ST = "sentence_transformers.models."


def _folder(
    root: Path,
    *,
    modules: list[str] | None = ("Transformer", "Pooling", "Normalize"),
    pooling: dict | None = None,  # type: ignore[assignment]
    sbert: dict | None = None,
    st_config: dict | None = None,
    tokenizer_config: dict | None = None,
    config: dict | None = None,
) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config if config is not None else {"model_type": "bert", "max_position_embeddings": 512}))
    if modules is not None:
        paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize", "Dense": "2_Dense"}
        (root / "modules.json").write_text(json.dumps([{"idx": i, "name": str(i), "path": paths[m], "type": ST + m} for i, m in enumerate(modules)]))
        (root / "1_Pooling").mkdir()
        (root / "1_Pooling" / "config.json").write_text(
            json.dumps(
                pooling if pooling is not None else {"word_embedding_dimension": 8, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}
            )
        )
    if sbert is not None:
        (root / "sentence_bert_config.json").write_text(json.dumps(sbert))
    if st_config is not None:
        (root / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    if tokenizer_config is not None:
        (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return root
