"""Intake of an ONNX encoder: is the graph safe to load and does it fit its manifest?

The checks run on the model's protobuf (``onnx``, external data not loaded)
before onnxruntime ever sees it: tensors stored as external data must live in
regular files inside the submission; operators must come from the standard
domains (custom-op libraries are never registered); no operator may draw
random numbers (:mod:`grader.submissions.onnx_determinism`); the graph's inputs must be
among the ones the grader feeds, and the manifest's output must exist with the
rank its pooling implies.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx

from grader.errors import SubmissionError
from grader.submissions.manifest import MANIFEST_NAME, OnnxManifest
from grader.submissions.onnx_determinism import refuse_random_operators

FED_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


@dataclass(frozen=True)
class OnnxModelInfo:
    """What intake learnt about a model."""

    inputs: tuple[str, ...]
    output: str
    output_rank: int | None
    dimension: int | None
    opset: int


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _graphs(sub)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in ``graph`` itself: initializers (dense and sparse) and node attributes."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                yield attribute.t
            elif attribute.type == onnx.AttributeProto.TENSORS:
                yield from attribute.tensors
            elif attribute.type == onnx.AttributeProto.SPARSE_TENSOR:
                yield from (attribute.sparse_tensor.values, attribute.sparse_tensor.indices)
            elif attribute.type == onnx.AttributeProto.SPARSE_TENSORS:
                for sparse in attribute.sparse_tensors:
                    yield from (sparse.values, sparse.indices)


def _function_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in the model's local functions (``model.functions``), subgraphs included.

    A function's nodes carry attributes like a graph's (a ``Constant`` holds a
    tensor), and a tensor there may name external data as well.
    """
    for function in model.functions:
        holder = onnx.GraphProto()
        holder.node.extend(function.node)
        for graph in _graphs(holder):
            yield from _graph_tensors(graph)


def _check_external_data(model: onnx.ModelProto, folder: Path, model_path: Path) -> None:
    base = model_path.parent.resolve()
    root = folder.resolve()
    tensors = itertools.chain((tensor for graph in _graphs(model.graph) for tensor in _graph_tensors(graph)), _function_tensors(model))
    for tensor in tensors:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
        if not location or os.path.isabs(location) or "\\" in location or ".." in Path(location).parts:
            raise SubmissionError(
                f"tensor {tensor.name!r} names external data {location!r} outside the submission", path=model_path, field="external_data"
            )
        target = base / location
        if target.is_symlink() or not target.is_file() or not target.resolve().is_relative_to(root):
            raise SubmissionError(
                f"tensor {tensor.name!r}: external data {location!r} is not a regular file inside the submission",
                path=model_path,
                field="external_data",
            )


def _dim_value(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    return dim.dim_value if dim.HasField("dim_value") else None


def inspect_onnx_model(folder: Path, manifest: OnnxManifest) -> OnnxModelInfo:
    """Check the model against the rules above and the manifest; raise naming the field."""
    model_path = folder / manifest.model
    manifest_path = folder / MANIFEST_NAME
    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and friends from protobuf
        raise SubmissionError(f"not a readable ONNX model: {type(exc).__name__}: {exc}", path=model_path) from None
    _check_external_data(model, folder, model_path)
    for opset in model.opset_import:
        if opset.domain not in STANDARD_DOMAINS:
            raise SubmissionError(f"uses operator domain {opset.domain!r}; custom operators are not allowed", path=model_path, field="opset_import")
    refuse_random_operators(model, model_path)
    initializers = {tensor.name for tensor in model.graph.initializer}
    inputs = tuple(value.name for value in model.graph.input if value.name not in initializers)
    unknown = [name for name in inputs if name not in FED_INPUTS]
    if unknown:
        raise SubmissionError(
            f"model input {unknown[0]!r} is not one the grader feeds ({', '.join(FED_INPUTS)})",
            path=model_path,
            field="inputs",
        )
    if "input_ids" not in inputs:
        raise SubmissionError("model has no 'input_ids' input", path=model_path, field="inputs")
    outputs = {value.name: value for value in model.graph.output}
    if manifest.output not in outputs:
        raise SubmissionError(
            f"names output {manifest.output!r}, but the model's outputs are {sorted(outputs)}",
            path=manifest_path,
            field="/output",
        )
    value = outputs[manifest.output]
    rank: int | None = None
    dimension: int | None = None
    if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
        dims = value.type.tensor_type.shape.dim
        rank = len(dims)
        dimension = _dim_value(dims[-1]) if dims else None
    expected_rank = 2 if manifest.pooling == "none" else 3
    if rank is not None and rank != expected_rank:
        raise SubmissionError(
            f"pooling {manifest.pooling!r} needs a rank-{expected_rank} output, but {manifest.output!r} has rank {rank}",
            path=manifest_path,
            field="/pooling",
        )
    opset_version = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return OnnxModelInfo(inputs=inputs, output=manifest.output, output_rank=rank, dimension=dimension, opset=opset_version)
