"""Tiny, real ONNX encoders and tokenizers built in tests (onnx.helper + tokenizers).

The graphs are real: onnxruntime runs them. Embeddings are a lookup table, so
expected vectors can be derived independently with numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, pre_tokenizers, processors

WORDS = ["[UNK]", "[CLS]", "[PAD]"] + [f"w{i}" for i in range(61)]


def words(*numbers: int) -> str:
    """A text of the vocabulary's words: ``words(1, 2)`` is ``"w1 w2"``."""
    return " ".join(f"w{n}" for n in numbers)


def word_tokenizer(path: Path, *, with_cls: bool = False, file_max_length: int | None = None) -> Tokenizer:
    """A whitespace word-level tokenizer over WORDS; optionally with a [CLS] prefix and baked-in truncation."""
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if with_cls:
        tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A", special_tokens=[("[CLS]", 1)])
    if file_max_length is not None:
        tokenizer.enable_truncation(max_length=file_max_length)
        tokenizer.enable_padding(length=file_max_length, pad_id=2, pad_token="[PAD]")
    tokenizer.save(str(path))
    return tokenizer


def embedding_table(dim: int = 8, seed: int = 0) -> np.ndarray:
    """The lookup table the tiny models use (float32, one row per word)."""
    return np.random.default_rng(seed).standard_normal((len(WORDS), dim)).astype(np.float32)


def lookup_model(
    path: Path,
    table: np.ndarray,
    *,
    inputs: tuple[str, ...] = ("input_ids", "attention_mask"),
    pooled: bool = False,
    output: str = "last_hidden_state",
    domain: str | None = None,
    ids_input: str = "input_ids",
    input_type: int = TensorProto.INT64,
) -> None:
    """A graph: output = table[ids] (batch, tokens, dim), or its plain token mean (batch, dim) when ``pooled``.

    ``ids`` is the graph input ``ids_input`` (``input_ids`` unless a test wants a model
    without one); ``input_type`` is the element type every graph input declares
    (INT32 is gathered directly, any other non-INT64 type is cast to INT64 first).
    """
    nodes = []
    ids = ids_input
    if input_type not in (TensorProto.INT64, TensorProto.INT32):
        nodes.append(helper.make_node("Cast", [ids_input], ["ids_int64"], to=TensorProto.INT64))
        ids = "ids_int64"
    nodes.append(helper.make_node("Gather", ["table", ids], ["tokens" if pooled else output], axis=0))
    if pooled:
        nodes.append(helper.make_node("ReduceMean", ["tokens"], [output], axes=[1], keepdims=0))
    if domain is not None:
        nodes.append(helper.make_node("Mystery", [output], ["mystery"], domain=domain))
    graph_inputs = [helper.make_tensor_value_info(name, input_type, ["batch", "tokens"]) for name in inputs]
    shape = ["batch", table.shape[1]] if pooled else ["batch", "tokens", table.shape[1]]
    graph_outputs = [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)]
    graph = helper.make_graph(nodes, "lookup", graph_inputs, graph_outputs, initializer=[numpy_helper.from_array(table, "table")])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))


def onnx_submission(
    folder: Path,
    *,
    table: np.ndarray | None = None,
    manifest: dict | None = None,
    with_cls: bool = False,
    pooled: bool = False,
    file_max_length: int | None = None,
) -> Path:
    """Write a complete ONNX submission folder and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    table = embedding_table() if table is None else table
    word_tokenizer(folder / "tokenizer.json", with_cls=with_cls, file_max_length=file_max_length)
    lookup_model(folder / "model.onnx", table, pooled=pooled, output="sentence_embedding" if pooled else "last_hidden_state")
    data = {
        "kind": "onnx",
        "name": "tiny-lookup",
        "model": "model.onnx",
        "tokenizer": "tokenizer.json",
        "max_length": 16,
        "pooling": "none" if pooled else "mean",
        "normalize": True,
        "output": "sentence_embedding" if pooled else "last_hidden_state",
        "training": {"setting": "zero-shot", "datasets": []},
    }
    data.update(manifest or {})
    (folder / "submission.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def expected_token_ids(text: str, *, with_cls: bool = False, max_length: int = 16) -> list[int]:
    """The ids ``word_tokenizer`` gives ``text`` (whitespace words, unknown -> 0, [CLS] -> 1), cut at ``max_length``."""
    index = {word: i for i, word in enumerate(WORDS)}
    ids = [index.get(word, 0) for word in text.split()]
    return ([1, *ids] if with_cls else ids)[:max_length]


def expected_embeddings(
    texts: list[str], table: np.ndarray, *, pooling: str = "mean", normalize: bool = True, with_cls: bool = False, max_length: int = 16
) -> np.ndarray:
    """What a lookup-model submission should output for ``texts``, computed in float64 with numpy.

    ``mean`` and ``none`` (the pooled graph, given texts without padding) average the
    rows of the text's tokens; ``cls`` takes the first token's row.
    """
    vectors = []
    for text in texts:
        rows = table.astype(np.float64)[expected_token_ids(text, with_cls=with_cls, max_length=max_length)]
        vector = rows[0] if pooling == "cls" else rows.mean(axis=0)
        vectors.append(vector / np.linalg.norm(vector) if normalize else vector)
    return np.stack(vectors) if vectors else np.zeros((0, table.shape[1]))


def batch_mean_model(path: Path, table: np.ndarray, *, weight: float = 0.125) -> None:
    """A batch-dependent encoder: output = table[ids] + ``weight`` x the mean of every token row of the batch.

    The mean runs over all rows and positions of the batch, padding included, so a
    text's vector depends on which texts share its batch and how long the longest
    is: by construction, not by accident of GEMM blocking (the control of the shard
    tests: cutting inside an encoding chunk must change bits).
    """
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["tokens"], axis=0),
        helper.make_node("ReduceMean", ["tokens"], ["batch_mean"], axes=[0, 1], keepdims=1),
        helper.make_node("Mul", ["batch_mean", "weight"], ["shift"]),
        helper.make_node("Add", ["tokens", "shift"], ["last_hidden_state"]),
    ]
    graph_inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in ("input_ids", "attention_mask")]
    graph_outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", table.shape[1]])]
    initializers = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.asarray(weight, dtype=np.float32), "weight")]
    graph = helper.make_graph(nodes, "batch_mean", graph_inputs, graph_outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def batch_dependent_submission(folder: Path, *, table: np.ndarray | None = None, weight: float = 0.125) -> Path:
    """An ONNX submission folder whose model is :func:`batch_mean_model` (mean pooling, normalised)."""
    onnx_submission(folder, table=table)
    batch_mean_model(folder / "model.onnx", embedding_table() if table is None else table, weight=weight)
    return folder


def tokens_model(
    path: Path,
    table: np.ndarray,
    nodes: list[onnx.NodeProto],
    *,
    initializers: tuple[onnx.TensorProto, ...] = (),
    opsets: tuple[tuple[str, int], ...] = (("", 17),),
    functions: tuple[onnx.FunctionProto, ...] = (),
) -> None:
    """A lookup graph whose ``nodes`` turn ``tokens`` (table[input_ids], batch x tokens x dim) into ``last_hidden_state``.

    For models that differ from :func:`lookup_model` only in what follows the
    lookup (a random operator, a subgraph, a local function); ``opsets`` are
    (domain, version) pairs, ``functions`` the model's local functions.
    """
    graph_inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in ("input_ids", "attention_mask")]
    graph_outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", table.shape[1]])]
    lookup = helper.make_node("Gather", ["table", "input_ids"], ["tokens"], axis=0)
    graph = helper.make_graph(
        [lookup, *nodes], "tokens", graph_inputs, graph_outputs, initializer=[numpy_helper.from_array(table, "table"), *initializers]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets], functions=list(functions))
    model.ir_version = 8
    onnx.save(model, str(path))
