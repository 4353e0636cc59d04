"""Intake refuses ONNX graphs that can draw random numbers (grader/submissions/onnx_determinism.py).

Every model is a real graph written with ``onnx.helper``: the tiny lookup encoder
of ``tests/onnx_models.py`` with a random operator after the lookup, in the main
graph, in an ``If``/``Loop``/``Scan`` body, in any node's GRAPHS attribute or in a
model-local function. The refusal is asserted as the one line a participant sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from grader.cli.main import cli
from grader.errors import SubmissionError
from grader.hosting.intake.refusals import invalid
from grader.hosting.intake.upload_checks import check_submission
from grader.submissions.manifest import OnnxManifest, load_manifest
from grader.submissions.onnx_determinism import DROPOUT_HINT, DROPOUT_TRAINING_MODE, RANDOM_HINT, RANDOM_OPS
from grader.submissions.onnx_intake import OnnxModelInfo, inspect_onnx_model
from tests.onnx_models import embedding_table, onnx_submission, tokens_model

BROKEN = Path(__file__).resolve().parent / "broken_submissions"
DIM = 8

# --------------------------------------------------------------------------- models


def _scalar(name: str, value: object, dtype: type = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def _coin(draw: str) -> list[onnx.NodeProto]:
    """The issue's coin: negate every vector when the mean of ``draw`` falls below one half."""
    return [
        helper.make_node("Cast", [draw], ["draw_float"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["draw_float"], ["draw_mean"], keepdims=0),
        helper.make_node("Less", ["draw_mean", "half"], ["heads"]),
        helper.make_node("Neg", ["tokens"], ["negated"]),
        helper.make_node("Where", ["heads", "negated", "tokens"], ["last_hidden_state"]),
    ]


def _value(name: str) -> onnx.ValueInfoProto:
    """A subgraph's input or output (rank and shape left to the outer graph)."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def _submission(
    tmp_path: Path, nodes: list[onnx.NodeProto], *, initializers: tuple[TensorProto, ...] = (), opsets: tuple[tuple[str, int], ...] = (("", 17),)
) -> Path:
    """An ONNX submission folder whose model is :func:`tokens_model` with ``nodes`` after the lookup (and a float ``half``)."""
    folder = onnx_submission(tmp_path / "sub")
    tokens_model(folder / "model.onnx", embedding_table(DIM), nodes, initializers=(_scalar("half", 0.5), *initializers), opsets=opsets)
    return folder


def _intake(folder: Path) -> OnnxModelInfo:
    manifest = load_manifest(folder)
    assert isinstance(manifest, OnnxManifest)
    return inspect_onnx_model(folder, manifest)


def _refusal(folder: Path) -> SubmissionError:
    with pytest.raises(SubmissionError) as caught:
        _intake(folder)
    return caught.value


# --------------------------------------------------------------------------- random operators, one test each

#: op_type -> (domain, the node that draws into "draw", the initializers it needs)
RANDOM_CASES: dict[str, tuple[str, onnx.NodeProto, tuple[TensorProto, ...]]] = {
    "RandomUniform": ("", helper.make_node("RandomUniform", [], ["draw"], name="coin_draw", shape=[1]), ()),
    "RandomNormal": ("", helper.make_node("RandomNormal", [], ["draw"], name="coin_draw", shape=[1]), ()),
    "RandomUniformLike": ("", helper.make_node("RandomUniformLike", ["tokens"], ["draw"], name="coin_draw"), ()),
    "RandomNormalLike": ("", helper.make_node("RandomNormalLike", ["tokens"], ["draw"], name="coin_draw"), ()),
    "Bernoulli": ("", helper.make_node("Bernoulli", ["probability"], ["draw"], name="coin_draw"), (_scalar("probability", [0.5]),)),
    "Multinomial": (
        "",
        helper.make_node("Multinomial", ["logits"], ["draw"], name="coin_draw", sample_size=1),
        (_scalar("logits", [[0.0, 0.0]]),),
    ),
    # Top-p sampling of a generation loop; a real one holds a decoder graph, which intake never needs to see.
    "Sampling": (
        "com.microsoft",
        helper.make_node("Sampling", ["input_ids", "max_length"], ["draw"], name="coin_draw", domain="com.microsoft"),
        (_scalar("max_length", [4], np.int32),),
    ),
}


def test_the_cases_cover_every_random_operator() -> None:
    assert {(domain, op) for op, (domain, _node, _inits) in RANDOM_CASES.items()} == RANDOM_OPS


@pytest.mark.parametrize("op_type", sorted(RANDOM_CASES))
def test_a_random_operator_is_refused_naming_the_node(tmp_path: Path, op_type: str) -> None:
    domain, node, initializers = RANDOM_CASES[op_type]
    opsets = (("", 17), ("com.microsoft", 1)) if domain else (("", 17),)
    folder = _submission(tmp_path, [node, *_coin("draw")], initializers=initializers, opsets=opsets)
    error = _refusal(folder)
    assert str(error) == (
        f"{folder / 'model.onnx'}: graph > node 'coin_draw' ({op_type}, domain {domain or 'ai.onnx'}): {op_type} draws random numbers, "
        "so two runs of the model disagree; random operators are refused, a seed included (a seeded kernel still draws new numbers for each batch)"
    )
    assert error.hint == RANDOM_HINT


def test_the_default_domain_spelt_ai_onnx_is_the_same_domain(tmp_path: Path) -> None:
    node = helper.make_node("RandomUniformLike", ["tokens"], ["draw"], name="coin_draw", domain="ai.onnx")
    error = _refusal(_submission(tmp_path, [node, *_coin("draw")], opsets=(("", 17), ("ai.onnx", 17))))
    assert "graph > node 'coin_draw' (RandomUniformLike, domain ai.onnx): RandomUniformLike draws random numbers" in str(error)


def test_an_operator_of_that_name_in_another_domain_is_not_taken_for_it(tmp_path: Path) -> None:
    """``ai.onnx.ml`` has no random operator: a node there is not refused for its op_type alone (onnxruntime refuses an unknown one)."""
    node = helper.make_node("RandomUniformLike", ["tokens"], ["draw"], name="coin_draw", domain="ai.onnx.ml")
    assert _intake(_submission(tmp_path, [node, *_coin("draw")], opsets=(("", 17), ("ai.onnx.ml", 3)))).output == "last_hidden_state"


def test_a_seed_does_not_make_a_random_operator_acceptable(tmp_path: Path) -> None:
    """onnxruntime seeds the kernel once per session: each run draws anew, so the coin lands both ways."""
    node = helper.make_node("RandomUniformLike", ["tokens"], ["draw"], name="coin_draw", seed=7.0)
    folder = _submission(tmp_path, [node, *_coin("draw")])
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = {"input_ids": np.array([[3, 4, 5]], dtype=np.int64), "attention_mask": np.ones((1, 3), dtype=np.int64)}
    signs = {float(np.sign(session.run(None, feed)[0][0, 0, 0])) for _ in range(40)}
    assert len(signs) == 2  # both faces in 40 tosses of one seeded session (all alike: 2 ** -39)
    error = _refusal(folder)
    assert "RandomUniformLike draws random numbers" in str(error) and "a seed included" in str(error)


# --------------------------------------------------------------------------- dropouts and their training_mode

#: op_type -> (domain, the inputs before training_mode); BiasDropout's residual is optional and left out ("").
DROPOUT_INPUTS: dict[str, tuple[str, list[str]]] = {
    "Dropout": ("", ["tokens", "ratio"]),
    "BitmaskDropout": ("com.microsoft", ["tokens", "ratio"]),
    "BiasDropout": ("com.microsoft", ["tokens", "bias", "", "ratio"]),
    "BitmaskBiasDropout": ("com.microsoft", ["tokens", "bias", "", "ratio"]),
}


def test_the_cases_cover_every_dropout() -> None:
    assert {(domain, op): len(inputs) for op, (domain, inputs) in DROPOUT_INPUTS.items()} == dict(DROPOUT_TRAINING_MODE)


def _dropout(op_type: str, mode: str | None) -> onnx.NodeProto:
    """``op_type`` on ``tokens`` into ``last_hidden_state``, its training_mode ``mode`` (None: no such input)."""
    domain, inputs = DROPOUT_INPUTS[op_type]
    return helper.make_node(op_type, inputs + ([] if mode is None else [mode]), ["last_hidden_state"], name="drop", domain=domain)


def _dropout_submission(tmp_path: Path, op_type: str, mode: str | None, nodes: list[onnx.NodeProto], initializers: list[TensorProto]) -> Path:
    common = [_scalar("ratio", 0.5), _scalar("bias", np.zeros(DIM))]
    opsets = (("", 17), ("com.microsoft", 1))
    return _submission(tmp_path, [*nodes, _dropout(op_type, mode)], initializers=(*common, *initializers), opsets=opsets)


#: case -> (training_mode, nodes that make it, initializers that hold it)
ACCEPTED_MODES: dict[str, tuple[str | None, list[onnx.NodeProto], list[TensorProto]]] = {
    "absent": (None, [], []),
    "empty name": ("", [], []),
    "false initializer": ("off", [], [_scalar("off", False, np.bool_)]),
    "false Constant": ("off", [helper.make_node("Constant", [], ["off"], value=_scalar("", False, np.bool_))], []),
}

REFUSED_MODES: dict[str, tuple[str | None, list[onnx.NodeProto], list[TensorProto]]] = {
    "true initializer": ("on", [], [_scalar("on", True, np.bool_)]),
    "true Constant": ("on", [helper.make_node("Constant", [], ["on"], value=_scalar("", True, np.bool_))], []),
    # Not evaluated: a computed value is refused even when it would be false.
    "computed": ("on", [helper.make_node("Identity", ["off"], ["on"])], [_scalar("off", False, np.bool_)]),
    "rank-1 false": ("on", [], [numpy_helper.from_array(np.array([False]), "on")]),
    "graph input": ("attention_mask", [], []),
    # Two definitions of one name (not valid SSA): one that is not a false is enough to refuse.
    "false, redefined true": (
        "off",
        [helper.make_node("Constant", [], ["off"], value=_scalar("", True, np.bool_))],
        [_scalar("off", False, np.bool_)],
    ),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED_MODES))
@pytest.mark.parametrize("op_type", sorted(DROPOUT_INPUTS))
def test_a_dropout_without_training_mode_or_with_a_constant_false_is_accepted(tmp_path: Path, op_type: str, case: str) -> None:
    mode, nodes, initializers = ACCEPTED_MODES[case]
    assert _intake(_dropout_submission(tmp_path, op_type, mode, nodes, initializers)).output == "last_hidden_state"


@pytest.mark.parametrize("case", sorted(REFUSED_MODES))
@pytest.mark.parametrize("op_type", sorted(DROPOUT_INPUTS))
def test_a_dropout_whose_training_mode_may_be_true_is_refused(tmp_path: Path, op_type: str, case: str) -> None:
    mode, nodes, initializers = REFUSED_MODES[case]
    folder = _dropout_submission(tmp_path, op_type, mode, nodes, initializers)
    error = _refusal(folder)
    domain = DROPOUT_INPUTS[op_type][0] or "ai.onnx"
    assert str(error) == (
        f"{folder / 'model.onnx'}: graph > node 'drop' ({op_type}, domain {domain}): training_mode {mode!r} is neither absent "
        f"nor a constant false, so {op_type} may drop values at random; random operators are refused"
    )
    assert error.hint == DROPOUT_HINT


def test_an_initializer_that_is_also_a_graph_input_is_not_a_constant(tmp_path: Path) -> None:
    """Under IR 3 an initializer listed among the graph's inputs is only a default: whoever runs the graph may feed true."""
    folder = _dropout_submission(tmp_path, "Dropout", "off", [], [_scalar("off", False, np.bool_)])
    model = onnx.load(str(folder / "model.onnx"))
    model.graph.input.append(helper.make_tensor_value_info("off", TensorProto.BOOL, []))
    onnx.save(model, str(folder / "model.onnx"))
    assert "training_mode 'off' is neither absent nor a constant false" in str(_refusal(folder))


def test_a_false_held_as_external_data_is_not_read_so_not_a_constant(tmp_path: Path) -> None:
    off = TensorProto(name="off", data_type=TensorProto.BOOL, dims=[], data_location=TensorProto.EXTERNAL)
    entry = off.external_data.add()
    entry.key, entry.value = "location", "off.bin"
    folder = _dropout_submission(tmp_path, "Dropout", "off", [], [off])
    (folder / "off.bin").write_bytes(b"\x00")
    assert "training_mode 'off' is neither absent nor a constant false" in str(_refusal(folder))


# --------------------------------------------------------------------------- subgraphs and model functions


def _branch(name: str, nodes: list[onnx.NodeProto], output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [_value(output)])


def _if(name: str, then_nodes: list[onnx.NodeProto], then_out: str, *, cond: str = "yes", output: str = "last_hidden_state") -> onnx.NodeProto:
    else_branch = _branch("else", [helper.make_node("Identity", ["tokens"], ["kept"])], "kept")
    return helper.make_node("If", [cond], [output], name=name, then_branch=_branch("then", then_nodes, then_out), else_branch=else_branch)


DROP_ON = helper.make_node("Dropout", ["tokens", "ratio", "on"], ["dropped"], name="drop")
DROP_OFF = helper.make_node("Dropout", ["tokens", "ratio", "off"], ["dropped"], name="drop")
MODES = (_scalar("ratio", 0.5), _scalar("on", True, np.bool_), _scalar("off", False, np.bool_), _scalar("yes", True, np.bool_))


def test_a_dropout_in_an_if_branch_is_refused_with_its_path(tmp_path: Path) -> None:
    folder = _submission(tmp_path, [_if("cond_1", [DROP_ON], "dropped")], initializers=MODES)
    assert str(_refusal(folder)).startswith(f"{folder / 'model.onnx'}: graph > If 'cond_1' then_branch > node 'drop' (Dropout, domain ai.onnx): ")


def test_a_false_of_the_enclosing_graph_is_a_constant_in_the_branch(tmp_path: Path) -> None:
    folder = _submission(tmp_path, [_if("cond_1", [DROP_OFF], "dropped")], initializers=MODES)
    assert _intake(folder).output == "last_hidden_state"


def test_a_branch_that_shadows_the_outer_false_is_refused(tmp_path: Path) -> None:
    shadow = helper.make_node("Identity", ["on"], ["off"])
    folder = _submission(tmp_path, [_if("cond_1", [shadow, DROP_OFF], "dropped")], initializers=MODES)
    assert "then_branch > node 'drop' (Dropout, domain ai.onnx): training_mode 'off' is neither absent" in str(_refusal(folder))


def test_a_random_operator_two_levels_down_in_a_loop_is_refused_with_its_path(tmp_path: Path) -> None:
    """Loop body > unnamed If > else branch: the path names each level, an unnamed node by its position."""
    noisy_else = _branch("else", [helper.make_node("RandomNormalLike", ["carried"], ["noisy"], name="noise")], "noisy")
    inner = helper.make_node("If", ["yes"], ["stepped"], then_branch=_branch("then", [helper.make_node("Identity", ["carried"], ["same"])], "same"))
    inner.attribute.append(helper.make_attribute("else_branch", noisy_else))
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), inner],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            _value("carried"),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _value("stepped")],
    )
    loop = helper.make_node("Loop", ["trips", "", "tokens"], ["last_hidden_state"], name="repeat", body=body)
    folder = _submission(tmp_path, [loop], initializers=(*MODES, _scalar("trips", 2, np.int64)))
    assert str(_refusal(folder)).startswith(
        f"{folder / 'model.onnx'}: graph > Loop 'repeat' body > If #1 (unnamed) else_branch > node 'noise' (RandomNormalLike, domain ai.onnx): "
        "RandomNormalLike draws random numbers"
    )


def test_a_random_operator_in_a_scan_body_is_refused_with_its_path(tmp_path: Path) -> None:
    body = helper.make_graph(
        [helper.make_node("RandomUniformLike", ["row"], ["noisy_row"], name="noise")], "body", [_value("row")], [_value("noisy_row")]
    )
    scan = helper.make_node("Scan", ["tokens"], ["last_hidden_state"], name="rows", body=body, num_scan_inputs=1)
    folder = _submission(tmp_path, [scan])
    assert "graph > Scan 'rows' body > node 'noise' (RandomUniformLike, domain ai.onnx): RandomUniformLike draws" in str(_refusal(folder))


def test_the_graphs_attribute_of_any_node_is_walked(tmp_path: Path) -> None:
    """A GRAPHS attribute (no standard operator has one; a contrib op may): each graph in it, named by its position."""
    quiet = _branch("quiet", [helper.make_node("Identity", ["tokens"], ["same"])], "same")
    noisy = _branch("noisy", [helper.make_node("Bernoulli", ["half"], ["coin"], name="toss")], "coin")
    holder = helper.make_node("Identity", ["tokens"], ["last_hidden_state"], name="holder")
    holder.attribute.append(helper.make_attribute("branches", [quiet, noisy]))
    assert holder.attribute[0].type == onnx.AttributeProto.GRAPHS
    folder = _submission(tmp_path, [holder])
    assert "graph > Identity 'holder' branches[1] > node 'toss' (Bernoulli, domain ai.onnx): Bernoulli draws" in str(_refusal(folder))


def _with_function(folder: Path, nodes: list[onnx.NodeProto], inputs: list[str]) -> Path:
    """Add a local function 'local.Noisy' to the folder's model (uncalled: intake reads every function, called or not)."""
    path = folder / "model.onnx"
    model = onnx.load(str(path))
    model.functions.append(helper.make_function("local", "Noisy", inputs, ["dropped"], nodes, [helper.make_opsetid("", 17)]))
    onnx.save(model, str(path))
    return folder


def test_a_dropout_in_a_model_function_is_refused_with_its_path(tmp_path: Path) -> None:
    drop = helper.make_node("Dropout", ["x", "ratio", "mode"], ["dropped"], name="drop")
    folder = _with_function(_submission(tmp_path, [helper.make_node("Identity", ["tokens"], ["last_hidden_state"])]), [drop], ["x", "ratio", "mode"])
    assert str(_refusal(folder)) == (
        f"{folder / 'model.onnx'}: function 'local.Noisy' > node 'drop' (Dropout, domain ai.onnx): training_mode 'mode' is neither absent "
        "nor a constant false, so Dropout may drop values at random; random operators are refused"
    )


def test_a_constant_false_inside_a_model_function_is_accepted(tmp_path: Path) -> None:
    off = helper.make_node("Constant", [], ["off"], value=_scalar("", False, np.bool_))
    drop = helper.make_node("Dropout", ["x", "ratio", "off"], ["dropped"], name="drop")
    folder = _with_function(_submission(tmp_path, [helper.make_node("Identity", ["tokens"], ["last_hidden_state"])]), [off, drop], ["x", "ratio"])
    assert _intake(folder).output == "last_hidden_state"


# --------------------------------------------------------------------------- the lists against onnxruntime


def _onnxruntime_schemas() -> dict[tuple[str, str], Any]:
    """The newest schema of each operator the installed onnxruntime registers, by (domain, op_type)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

    newest: dict[tuple[str, str], Any] = {}
    for schema in sorted(get_all_operator_schema(), key=lambda s: s.since_version):
        newest[("" if schema.domain == "ai.onnx" else schema.domain, schema.name)] = schema
    return newest


#: Operators with a seed that draw nothing: MurmurHash3's seed is the hash's.
SEEDED_BUT_DETERMINISTIC = {("com.microsoft", "MurmurHash3")}


def test_every_onnxruntime_operator_with_a_seed_is_refused_or_known_deterministic() -> None:
    """An onnxruntime upgrade that registers a new random operator fails here until the operator is classified."""
    seeded = {
        key for key, schema in _onnxruntime_schemas().items() if "seed" in schema.attributes or any(formal.name == "seed" for formal in schema.inputs)
    }
    assert seeded == RANDOM_OPS | set(DROPOUT_TRAINING_MODE) | SEEDED_BUT_DETERMINISTIC


def test_training_mode_is_at_the_listed_input_of_each_dropout() -> None:
    schemas = _onnxruntime_schemas()
    for key, position in DROPOUT_TRAINING_MODE.items():
        assert [formal.name for formal in schemas[key].inputs].index("training_mode") == position, key


# --------------------------------------------------------------------------- grader check, grader run and hosting intake


def test_hosting_intake_refuses_the_upload() -> None:
    """The server's intake (the same code as ``grader check`` steps 1-2) refuses it: 422, the one line without the server's folders."""
    folder = BROKEN / "onnx-random-dropout"
    with pytest.raises(SubmissionError) as caught:
        check_submission(folder)
    refusal = invalid(caught.value, folder)
    assert refusal.status == 422
    assert str(refusal) == (
        "invalid submission: model.onnx: graph > If 'cond_1' then_branch > node 'drop' (Dropout, domain ai.onnx): training_mode 'training' "
        "is neither absent nor a constant false, so Dropout may drop values at random; random operators are refused"
    )


def test_grader_run_exits_with_the_submissions_fault(tmp_path: Path) -> None:
    folder = BROKEN / "onnx-random-dropout"
    result = CliRunner().invoke(
        cli, ["run", str(folder), "--benchmark", "mini", "--tasks", "text2code", "--out", str(tmp_path / "out"), "--sandbox", "none"]
    )
    assert result.exit_code == 3, result.output  # the submission's fault (grader.cli.exits)
    assert result.stderr.splitlines()[0] == (
        f"error: {folder / 'model.onnx'}: graph > If 'cond_1' then_branch > node 'drop' (Dropout, domain ai.onnx): training_mode 'training' "
        "is neither absent nor a constant false, so Dropout may drop values at random; random operators are refused"
    )
