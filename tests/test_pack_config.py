"""``grader pack``: reading a model folder's own configuration (no torch needed).

Folders are written by hand in the layouts sentence-transformers saves (old boolean
pooling keys and the newer ``pooling_mode``), and as plain transformers folders.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.errors import PackError
from grader.pack import Overrides, manifest_for, read_settings, row_cosines

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


def test_sentence_transformers_folder(tmp_path):
    folder = _folder(
        tmp_path / "m",
        sbert={"max_seq_length": 256, "do_lower_case": False},
        st_config={"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None},
    )
    settings = read_settings(folder)
    assert (settings.pooling, settings.normalize, settings.max_length) == ("mean", True, 256)
    assert (settings.query_prefix, settings.document_prefix) == ("query: ", "passage: ")
    assert settings.sentence_transformers and settings.transformer_dir == folder
    notes = settings.notes()
    assert notes[0] == f'pooling = "mean" ({folder / "1_Pooling" / "config.json"})'
    assert f"max_length = 256 ({folder / 'sentence_bert_config.json'}: max_seq_length)" in notes
    assert f'document_prefix = "passage: " ({folder / "config_sentence_transformers.json"}: prompts.passage)' in notes
    assert manifest_for(settings, "m") == {
        "kind": "onnx",
        "name": "m",
        "model": "model.onnx",
        "tokenizer": "tokenizer.json",
        "max_length": 256,
        "pooling": "mean",
        "normalize": True,
        "output": "last_hidden_state",
        "query_prefix": "query: ",
        "document_prefix": "passage: ",
    }


def test_new_pooling_mode_key_no_normalize_and_default_prompt(tmp_path):
    folder = _folder(
        tmp_path / "m",
        modules=["Transformer", "Pooling"],
        pooling={"pooling_mode": "cls", "include_prompt": True},
        st_config={"prompts": {"query": "Represent this query: ", "retrieval": "Represent: "}, "default_prompt_name": "retrieval"},
        tokenizer_config={"model_max_length": 128},
    )
    settings = read_settings(folder)
    assert (settings.pooling, settings.normalize, settings.max_length) == ("cls", False, 128)
    # The query prompt is configured; documents get the default prompt, as sentence-transformers would give them.
    assert (settings.query_prefix, settings.document_prefix) == ("Represent this query: ", "Represent: ")
    assert "default_prompt_name 'retrieval'" in settings.sources["document_prefix"]
    assert settings.sources["normalize"].endswith("no Normalize module")


def test_command_line_wins(tmp_path):
    folder = _folder(tmp_path / "m", sbert={"max_seq_length": 256}, st_config={"prompts": {"query": "q: ", "document": "d: "}})
    settings = read_settings(folder, Overrides(max_length=64, query_prefix="", document_prefix="doc ", pooling="cls", normalize=False))
    assert (settings.pooling, settings.normalize, settings.max_length, settings.query_prefix, settings.document_prefix) == (
        "cls",
        False,
        64,
        "",
        "doc ",
    )
    assert settings.sources == {
        "pooling": "--pooling",
        "normalize": "--no-normalize",
        "max_length": "--max-length",
        "query_prefix": "--query-prefix",
        "document_prefix": "--document-prefix",
    }


def test_plain_transformers_folder_needs_pooling(tmp_path):
    folder = _folder(
        tmp_path / "m", modules=None, tokenizer_config={"model_max_length": 1000000000000000019884624838656}, config={"max_position_embeddings": 512}
    )
    with pytest.raises(PackError, match="has no modules.json .* --pooling mean or --pooling cls"):
        read_settings(folder)
    settings = read_settings(folder, Overrides(pooling="mean"))
    # tokenizer_config's "no limit" sentinel is skipped; config.json's positions give the length.
    assert (settings.pooling, settings.normalize, settings.max_length) == ("mean", False, 512)
    assert settings.sources["max_length"] == f"{folder / 'config.json'}: max_position_embeddings"
    assert not settings.sentence_transformers


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"modules": ["Transformer", "Pooling", "Dense", "Normalize"]},
            r"modules \['Transformer', 'Pooling', 'Dense', 'Normalize'\]: the grader's ONNX submissions express",
        ),
        ({"pooling": {"pooling_mode_max_tokens": True}}, "pooling mode 'max_tokens' is not one the grader can apply"),
        ({"pooling": {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}}, r"pooling modes \['cls_token', 'mean_tokens'\]"),
        ({"pooling": {"pooling_mode": "lasttoken"}}, "pooling mode 'lasttoken'"),
        ({"sbert": {"max_seq_length": 128, "do_lower_case": True}}, "do_lower_case is true"),
        ({"pooling": {"pooling_mode": "mean", "include_prompt": False}, "st_config": {"prompts": {"query": "q: "}}}, "include_prompt false"),
    ],
)
def test_refusals(tmp_path, kwargs, message):
    with pytest.raises(PackError, match=message):
        read_settings(_folder(tmp_path / "m", **kwargs))


def test_include_prompt_false_without_prompts_is_fine(tmp_path):
    settings = read_settings(_folder(tmp_path / "m", pooling={"pooling_mode": "mean", "include_prompt": False}, sbert={"max_seq_length": 32}))
    assert settings.pooling == "mean" and settings.query_prefix == ""


def test_bad_files_and_options(tmp_path):
    folder = _folder(tmp_path / "m", sbert={"max_seq_length": 32})
    (folder / "modules.json").write_text("[{")
    with pytest.raises(PackError, match=r"modules.json:1: invalid JSON"):
        read_settings(folder)
    with pytest.raises(PackError, match="not a folder"):
        read_settings(tmp_path / "nope")
    with pytest.raises(PackError, match="--pooling must be one of mean, cls"):
        read_settings(_folder(tmp_path / "n", sbert={"max_seq_length": 32}), Overrides(pooling="max"))
    with pytest.raises(PackError, match="no config.json"):
        read_settings(_no_config(tmp_path / "p"))


def _no_config(root: Path) -> Path:
    folder = _folder(root, sbert={"max_seq_length": 32})
    (folder / "config.json").unlink()
    return folder


def test_row_cosines():
    a = [[1.0, 0.0], [0.0, 0.0], [3.0, 4.0]]
    b = [[2.0, 0.0], [0.0, 0.0], [4.0, -3.0]]
    assert row_cosines(a, b).tolist() == [1.0, 1.0, 0.0]


def test_missing_extra_is_one_line_with_the_install_commands(tmp_path):
    """With torch unimportable, ``grader pack`` says how to install the extra, exits 2 and writes nothing."""
    folder = _folder(tmp_path / "m", sbert={"max_seq_length": 32})
    out = tmp_path / "sub"
    code = (
        # A finder that refuses torch, as when it is not installed. (sys.modules['torch'] = None would also do that,
        # but libraries that peek into sys.modules, such as scipy's array-API checks, then crash on the None.)
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'): raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "from grader.cli.main import main; sys.argv = ['grader', 'pack', sys.argv[1], '--out', sys.argv[2], '--training-setting', 'zero-shot']; main()"
    )
    result = subprocess.run([sys.executable, "-c", code, str(folder), str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    assert errors[0].startswith("error: grader pack needs the 'pack' extra (torch is missing")
    assert errors[1] == "hint: pip install torch==2.13.0 (the CPU wheel), then pip install -e '.[pack]'"
    assert "Traceback" not in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [folder]


def test_existing_out_is_refused_before_anything_runs(tmp_path):
    from click.testing import CliRunner

    from grader.cli.main import cli

    folder = _folder(tmp_path / "m", sbert={"max_seq_length": 32})
    out = tmp_path / "sub"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["pack", str(folder), "--out", str(out)])
    assert result.exit_code == 2 and f"error: {out} already exists; choose a new --out folder" in result.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
