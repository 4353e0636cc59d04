"""Determinism of an ONNX encoder: refuse every operator that can draw random numbers.

Hosting grades an ONNX submission on two workers and accepts the grade only when
their runs agree; the worker outside a 2-1 majority is flagged. A graph with a
random operator makes honest replicas disagree (a coin that negates one batch's
vectors did), so the flag falls on an honest worker and the participant's quota
pays for it. Such graphs are refused at intake, by ``grader check`` and by the
server alike (both call :func:`grader.submissions.onnx_intake.inspect_onnx_model`).

Refused, wherever the node sits (the main graph, any subgraph held in a GRAPH or
GRAPHS attribute of any node, at any depth, and the model's local functions):

- the operators of :data:`RANDOM_OPS`, whatever their attributes. A ``seed`` does
  not make one acceptable: onnxruntime seeds the kernel once per session and each
  run draws the next numbers, so a vector still depends on how many batches the
  session encoded before it (which differs between a whole grade, a shard and a
  resumed run).
- the dropouts of :data:`DROPOUT_TRAINING_MODE`, unless their ``training_mode``
  input is absent (missing, or the empty name) or a constant false: a rank-0 bool
  false held by an initializer of the graph or of an enclosing graph, or by a
  ``Constant`` node, and not shadowed by an input or another node's output. A
  graph input, a computed value, a true or an unreadable tensor is refused: the
  check does not evaluate the graph. Dropout before opset 12 has no
  ``training_mode`` input and is the identity in onnxruntime (which has no kernel
  for the opset-1 and opset-6 forms whose ``is_test`` attribute chose training).

The lists follow what onnxruntime registers (``get_all_operator_schema``):
``tests/test_onnx_determinism.py`` fails when an installed onnxruntime registers
an operator with a ``seed`` that is neither listed here nor known to be
deterministic, so an upgrade cannot bring a new random operator in unseen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import onnx
from onnx import numpy_helper

from grader.errors import SubmissionError

#: Operators that draw random numbers whatever their attributes, as (domain, op_type); "" is the default domain.
RANDOM_OPS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "RandomUniform"),
        ("", "RandomNormal"),
        ("", "RandomUniformLike"),
        ("", "RandomNormalLike"),
        ("", "Bernoulli"),  # an onnx function (RandomUniformLike, Less): onnxruntime runs its body
        ("", "Multinomial"),
        # onnxruntime's sampling step of a text-generation loop (top-p): a random draw, its generator seeded by an input.
        ("com.microsoft", "Sampling"),
    }
)

#: Dropout and onnxruntime's contrib dropouts, as (domain, op_type) -> the index of their ``training_mode`` input.
#: DropoutGrad and the other gradient ops exist only in onnxruntime's training builds and take their mask as an
#: input (they draw nothing); an inference onnxruntime refuses to load them, the same way on every worker.
DROPOUT_TRAINING_MODE: Mapping[tuple[str, str], int] = {
    ("", "Dropout"): 2,  # data, ratio, training_mode (opset 12 and later)
    ("com.microsoft", "BitmaskDropout"): 2,  # data, ratio, training_mode
    ("com.microsoft", "BiasDropout"): 4,  # data, bias, residual, ratio, training_mode
    ("com.microsoft", "BitmaskBiasDropout"): 4,  # data, bias, residual, ratio, training_mode
}

RANDOM_HINT = "remove the random operator: an encoder must give the same vectors for the same text on every run"
DROPOUT_HINT = (
    "export the model in inference mode (model.eval(); torch.onnx.export leaves no Dropout then), or give training_mode a false initializer"
)


def _domain(node: onnx.NodeProto) -> str:
    """The node's domain with the default spelt one way ("ai.onnx" and "" are the same domain)."""
    return "" if node.domain == "ai.onnx" else node.domain


def _node_label(node: onnx.NodeProto, index: int) -> str:
    """How a path names a node: its name, or its position when it has none (names are optional)."""
    return repr(node.name) if node.name else f"#{index} (unnamed)"


def _is_false_scalar(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` is a rank-0 bool holding false, read without loading external data."""
    if tensor.data_type != onnx.TensorProto.BOOL or len(tensor.dims) != 0 or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return False
    try:
        value = numpy_helper.to_array(tensor)
    except (ValueError, TypeError):  # a malformed tensor (e.g. raw bytes that do not fit its shape): not a known false
        return False
    return not bool(value)


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a ``Constant`` node outputs when it is given literally (``value``), else None.

    The other forms (``value_int``, ``sparse_value``...) are never a bool scalar, and
    an attribute that refers to a function's attribute (``ref_attr_name``) is not
    known until the call: neither is a constant false.
    """
    if _domain(node) != "" or node.op_type != "Constant" or len(node.attribute) != 1:
        return None
    attribute = node.attribute[0]
    if attribute.name != "value" or attribute.type != onnx.AttributeProto.TENSOR or attribute.ref_attr_name:
        return None
    return attribute.t


def _constant_false_names(
    nodes: Sequence[onnx.NodeProto],
    initializers: Iterable[onnx.TensorProto],
    others: Iterable[str],
    inherited: frozenset[str],
) -> frozenset[str]:
    """The names that hold a constant false in a graph whose nodes, initializers and other names (inputs) are given.

    ``inherited`` are the enclosing graph's: a subgraph sees them unless it defines
    the same name itself (a subgraph may shadow an outer name). A name defined twice,
    once as something other than a constant false, is not one.
    """
    falses: set[str] = set()
    not_false = set(others)
    for tensor in initializers:
        (falses if _is_false_scalar(tensor) else not_false).add(tensor.name)
    for node in nodes:
        value = _constant_tensor(node)
        for output in node.output:
            (falses if value is not None and _is_false_scalar(value) else not_false).add(output)
    return frozenset((inherited - falses - not_false) | (falses - not_false))


def _refuse_random(node: onnx.NodeProto, where: str, false_names: frozenset[str], model_path: Path) -> None:
    """Raise if ``node`` itself can draw random numbers (its subgraphs are walked by the caller)."""
    key = (_domain(node), node.op_type)
    if key not in RANDOM_OPS and key not in DROPOUT_TRAINING_MODE:
        return
    field = f"{where} ({node.op_type}, domain {node.domain or 'ai.onnx'})"
    if key in RANDOM_OPS:
        raise SubmissionError(
            f"{node.op_type} draws random numbers, so two runs of the model disagree; random operators are refused, "
            "a seed included (a seeded kernel still draws new numbers for each batch)",
            path=model_path,
            field=field,
            hint=RANDOM_HINT,
        )
    position = DROPOUT_TRAINING_MODE[key]
    mode = node.input[position] if len(node.input) > position else ""
    if mode and mode not in false_names:
        raise SubmissionError(
            f"training_mode {mode!r} is neither absent nor a constant false, so {node.op_type} may drop values at random; "
            "random operators are refused",
            path=model_path,
            field=field,
            hint=DROPOUT_HINT,
        )


def _check_nodes(
    nodes: Sequence[onnx.NodeProto],
    *,
    initializers: Iterable[onnx.TensorProto],
    others: Iterable[str],
    inherited: frozenset[str],
    where: str,
    model_path: Path,
) -> None:
    """Refuse a random node among ``nodes`` or in the subgraphs they hold, at any depth; ``where`` names the graph."""
    false_names = _constant_false_names(nodes, initializers, others, inherited)
    for index, node in enumerate(nodes):
        label = _node_label(node, index)
        _refuse_random(node, f"{where} > node {label}", false_names, model_path)
        for attribute in node.attribute:
            # Any node's graph attributes are walked, not only If/Loop/Scan's: contrib ops (BeamSearch...) hold graphs too.
            if attribute.type == onnx.AttributeProto.GRAPH:
                subgraphs = [(attribute.name, attribute.g)]
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                subgraphs = [(f"{attribute.name}[{i}]", graph) for i, graph in enumerate(attribute.graphs)]
            else:
                continue
            for name, graph in subgraphs:
                _check_graph(graph, inherited=false_names, where=f"{where} > {node.op_type} {label} {name}", model_path=model_path)


def _check_graph(graph: onnx.GraphProto, *, inherited: frozenset[str], where: str, model_path: Path) -> None:
    # An initializer that is also a graph input is only a default (IR 3): whoever runs the graph may feed another value.
    others = [value.name for value in graph.input] + [sparse.values.name for sparse in graph.sparse_initializer]
    _check_nodes(graph.node, initializers=graph.initializer, others=others, inherited=inherited, where=where, model_path=model_path)


def refuse_random_operators(model: onnx.ModelProto, model_path: Path) -> None:
    """Raise :class:`SubmissionError` naming the first node of ``model`` that can draw random numbers.

    The line names the model file and the node's path: the graph, each enclosing
    node and attribute, the node's name (or position), op_type and domain, e.g.
    ``model.onnx: graph > If 'cond_1' then_branch > node 'drop' (Dropout, domain ai.onnx): ...``.
    """
    _check_graph(model.graph, inherited=frozenset(), where="graph", model_path=model_path)
    for function in model.functions:
        qualified = f"{function.domain}.{function.name}"
        # A function's inputs are whatever its callers pass: only its own Constant nodes are known.
        _check_nodes(
            function.node,
            initializers=(),
            others=function.input,
            inherited=frozenset(),
            where=f"function {qualified!r}",
            model_path=model_path,
        )
