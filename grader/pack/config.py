"""What a model folder says about how it embeds: pooling, normalisation, maximum length, prompts.

A sentence-transformers folder describes its pipeline in ``modules.json``
(Transformer, then Pooling, then optionally Normalize), the pooling in the
Pooling module's ``config.json``, the maximum length in ``sentence_bert_config.json``
and the prompts in ``config_sentence_transformers.json``. A plain transformers
folder (``config.json`` and weights, no ``modules.json``) says none of that, so
``--pooling`` is required there. Options given on the command line win over the
files; every value is recorded with where it came from, so ``grader pack`` can
say so. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.errors import PackError

MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
SBERT_CONFIG_FILE = "sentence_bert_config.json"
POOLINGS = ("mean", "cls")
#: Names sentence-transformers models give the prompt for documents, in the order looked for.
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus", "code")
#: A tokenizer_config.json model_max_length above this is transformers' "no limit" sentinel, not a length.
_NO_LIMIT = 1_000_000


@dataclass(frozen=True)
class Overrides:
    """What the command line sets explicitly (None: read it from the folder)."""

    max_length: int | None = None
    query_prefix: str | None = None
    document_prefix: str | None = None
    pooling: str | None = None
    normalize: bool | None = None


@dataclass(frozen=True)
class PackSettings:
    """How the packed submission embeds, and where each value came from."""

    model_dir: Path
    transformer_dir: Path
    sentence_transformers: bool
    pooling: str
    normalize: bool
    max_length: int
    query_prefix: str
    document_prefix: str
    sources: Mapping[str, str] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """One line per setting: ``name = value (source)``."""
        values = {
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
        }
        return [f"{name} = {jsonio.dumps(value, ensure_ascii=True)} ({self.sources[name]})" for name, value in values.items()]


def _read_json(path: Path) -> Any:
    try:
        return jsonio.load_file(path)
    except jsonio.JsonError as error:
        raise PackError(f"{path}:{error.line}: {error.what}" if error.line else f"{path}: {error.what}") from None
    except OSError as error:
        raise PackError(f"{path}: cannot read: {error}") from None


def _module_kind(entry: Mapping[str, Any]) -> str:
    """``sentence_transformers.models.Pooling`` (or a newer module path) -> ``Pooling``."""
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def _pooling_from_config(path: Path) -> tuple[str, bool]:
    """(pooling, include_prompt) from a Pooling module's config.json, old (booleans) or new (``pooling_mode``) keys."""
    config = _read_json(path)
    if not isinstance(config, dict):
        raise PackError(f"{path}: expected a JSON object")
    include_prompt = config.get("include_prompt", True) is not False
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        modes = [mode]
    else:
        modes = [key.removeprefix("pooling_mode_") for key, value in sorted(config.items()) if key.startswith("pooling_mode_") and value is True]
    names = {"mean_tokens": "mean", "cls_token": "cls", "mean": "mean", "cls": "cls"}
    if len(modes) != 1:
        raise PackError(f"{path}: pooling modes {modes or 'none'}: the grader pools with exactly one of mean or cls")
    if modes[0] not in names:
        raise PackError(f"{path}: pooling mode {modes[0]!r} is not one the grader can apply (mean or cls)")
    return names[modes[0]], include_prompt


def _document_prompt(prompts: Mapping[str, Any]) -> tuple[str, str] | None:
    for name in DOCUMENT_PROMPT_NAMES:
        if isinstance(prompts.get(name), str):
            return name, prompts[name]
    return None


def _max_length_from_tokenizer(transformer_dir: Path) -> tuple[int, str] | None:
    for filename, key in (("tokenizer_config.json", "model_max_length"), ("config.json", "max_position_embeddings")):
        path = transformer_dir / filename
        if path.is_file():
            data = _read_json(path)
            value = data.get(key) if isinstance(data, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _NO_LIMIT:
                return value, f"{path}: {key}"
    return None


@dataclass
class _Found:
    """What a model folder's own files say (before the command line's overrides)."""

    transformer_dir: Path
    pooling: str | None = None
    normalize: bool | None = None
    include_prompt: bool = True
    max_length: int | None = None
    query_prefix: str | None = None
    document_prefix: str | None = None


def _sentence_transformers_settings(model_dir: Path, sources: dict[str, str]) -> _Found:
    """The settings of a sentence-transformers folder (its modules, pooling, max length, prompts); ``sources`` says where each came from."""
    modules_path = model_dir / MODULES_FILE
    modules = _read_json(modules_path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise PackError(f"{modules_path}: expected a list of module objects")
    kinds = [_module_kind(m) for m in modules]
    supported = (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"])
    if kinds not in supported:
        raise PackError(f"{modules_path}: modules {kinds}: the grader's ONNX submissions express Transformer, Pooling and an optional Normalize only")
    found = _Found(transformer_dir=model_dir / str(modules[0].get("path", "")))
    pooling_path = model_dir / str(modules[1].get("path", "")) / "config.json"
    found.pooling, found.include_prompt = _pooling_from_config(pooling_path)
    sources["pooling"] = f"{pooling_path}"
    found.normalize = len(kinds) == 3
    sources["normalize"] = f"{modules_path}: {'a' if found.normalize else 'no'} Normalize module"
    found.max_length = _max_length_from_sbert(found.transformer_dir / SBERT_CONFIG_FILE, sources)
    found.query_prefix, found.document_prefix = _prompts(model_dir / ST_CONFIG_FILE, sources)
    return found


def _max_length_from_sbert(sbert_path: Path, sources: dict[str, str]) -> int | None:
    """``max_seq_length`` of ``sentence_bert_config.json``, if it has one; refuses ``do_lower_case``."""
    if not sbert_path.is_file():
        return None
    sbert = _read_json(sbert_path)
    if not isinstance(sbert, dict):
        return None
    if sbert.get("do_lower_case") is True:
        raise PackError(f"{sbert_path}: do_lower_case is true: sentence-transformers lowercases texts before tokenizing, which the grader does not")
    value = sbert.get("max_seq_length")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        sources["max_length"] = f"{sbert_path}: max_seq_length"
        return value
    return None


def _prompts(st_path: Path, sources: dict[str, str]) -> tuple[str | None, str | None]:
    """The query and document prompts of ``config_sentence_transformers.json`` (the default prompt where no other is set)."""
    query_prefix: str | None = None
    document_prefix: str | None = None
    if not st_path.is_file():
        return query_prefix, document_prefix
    st_config = _read_json(st_path)
    prompts = st_config.get("prompts") if isinstance(st_config, dict) else None
    default_name = st_config.get("default_prompt_name") if isinstance(st_config, dict) else None
    if isinstance(prompts, dict):
        if isinstance(prompts.get("query"), str):
            query_prefix, sources["query_prefix"] = prompts["query"], f"{st_path}: prompts.query"
        found = _document_prompt(prompts)
        if found is not None:
            document_prefix, sources["document_prefix"] = found[1], f"{st_path}: prompts.{found[0]}"
        if isinstance(default_name, str) and isinstance(prompts.get(default_name), str):
            # sentence-transformers prepends the default prompt wherever no other is asked for.
            where = f"{st_path}: default_prompt_name {default_name!r}"
            if query_prefix is None:
                query_prefix, sources["query_prefix"] = prompts[default_name], where
            if document_prefix is None:
                document_prefix, sources["document_prefix"] = prompts[default_name], where
    return query_prefix, document_prefix


def read_settings(model_dir: Path, overrides: Overrides = Overrides()) -> PackSettings:
    """Read a sentence-transformers (or plain transformers) folder; refuse what the grader cannot reproduce."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise PackError(f"{model_dir}: not a folder")
    if overrides.pooling is not None and overrides.pooling not in POOLINGS:
        raise PackError(f"--pooling must be one of {', '.join(POOLINGS)}, got {overrides.pooling!r}")
    sources: dict[str, str] = {}
    modules_path = model_dir / MODULES_FILE
    sentence_transformers = modules_path.is_file()
    found = _sentence_transformers_settings(model_dir, sources) if sentence_transformers else _Found(transformer_dir=model_dir)
    pooling, normalize, include_prompt, transformer_dir = found.pooling, found.normalize, found.include_prompt, found.transformer_dir
    max_length, query_prefix, document_prefix = found.max_length, found.query_prefix, found.document_prefix
    if not sentence_transformers and overrides.pooling is None:
        raise PackError(
            f"{model_dir} has no {MODULES_FILE} (not a sentence-transformers folder): say how to pool with --pooling mean or --pooling cls"
        )
    if not (transformer_dir / "config.json").is_file():
        raise PackError(f"{transformer_dir}: no config.json (not a transformers model folder)")
    if overrides.pooling is not None:
        pooling, sources["pooling"] = overrides.pooling, "--pooling"
    if overrides.normalize is not None:
        normalize, sources["normalize"] = overrides.normalize, "--normalize" if overrides.normalize else "--no-normalize"
    elif normalize is None:
        normalize, sources["normalize"] = False, "default for a plain transformers folder (--normalize to change)"
    if overrides.max_length is not None:
        if overrides.max_length < 1:
            raise PackError(f"--max-length must be a positive integer, got {overrides.max_length}")
        max_length, sources["max_length"] = overrides.max_length, "--max-length"
    if max_length is None:
        found_length = _max_length_from_tokenizer(transformer_dir)
        if found_length is None:
            raise PackError(
                f"{model_dir}: no maximum length found (sentence_bert_config.json, tokenizer_config.json, config.json); give --max-length"
            )
        max_length, sources["max_length"] = found_length
    for key, value in (("query_prefix", overrides.query_prefix), ("document_prefix", overrides.document_prefix)):
        if value is not None:
            sources[key] = f"--{key.replace('_', '-')}"
    query_prefix = overrides.query_prefix if overrides.query_prefix is not None else query_prefix
    document_prefix = overrides.document_prefix if overrides.document_prefix is not None else document_prefix
    for key in ("query_prefix", "document_prefix"):
        sources.setdefault(key, "none configured")
    if not include_prompt and (query_prefix or document_prefix):
        raise PackError(
            f"{model_dir}: the Pooling module has include_prompt false (prompt tokens are left out of pooling), which the grader cannot do with a non-empty prefix"
        )
    assert pooling is not None
    return PackSettings(
        model_dir=model_dir,
        transformer_dir=transformer_dir,
        sentence_transformers=sentence_transformers,
        pooling=pooling,
        normalize=bool(normalize),
        max_length=max_length,
        query_prefix=query_prefix or "",
        document_prefix=document_prefix or "",
        sources=sources,
    )
