"""``grader pack``: the model's own name and facts, the model_card, and the training labels (options, terminal, refusal).

No torch needed: folders are written by hand as sentence-transformers and
transformers save them; the command runs as a user types it (a subprocess with
no terminal, and one on a real pseudo-terminal answering the questions).
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.hosting.intake.upload_checks import check_manifest_rules, missing_training_labels
from grader.pack import manifest_for, model_card, read_model_facts, read_settings
from grader.pack.build import fact_notes
from grader.pack.card import front_matter
from grader.submissions.manifest import Training, load_manifest
from tests.pack_support import _folder

README = """---
language: en
license: apache-2.0  # a comment
base_model: "nreimers/MiniLM-L6-H384-uncased"
tags:
- sentence-transformers
datasets:
- s2orc
- code_search_net
pipeline_tag: sentence-similarity
---

# all-MiniLM-L6-v2
This is a [sentence-transformers](https://www.SBERT.net) model.

```python
# not a heading
```
"""

# What grader pack runs in a subprocess: the real CLI, with torch made unimportable so that a run that gets past
# the questions stops at the extra's check (exit 2, its own line) instead of loading a model.
NO_TORCH_CLI = (
    "import sys\n"
    "class NoTorch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'): raise ImportError(f'No module named {name!r}')\n"
    "sys.meta_path.insert(0, NoTorch())\n"
    "from grader.cli.main import main; sys.argv = ['grader', 'pack', *sys.argv[1:]]; main()"
)


def _model(root: Path, *, readme: str | None = README, name_or_path: str | None = None) -> Path:
    config = {"model_type": "bert", "max_position_embeddings": 512}
    if name_or_path is not None:
        config["_name_or_path"] = name_or_path
    folder = _folder(root, sbert={"max_seq_length": 256}, config=config)
    if readme is not None:
        (folder / "README.md").write_text(readme, encoding="utf-8")
    return folder


def test_front_matter_reads_scalars_lists_and_quotes():
    meta = front_matter(README)
    assert meta["license"] == "apache-2.0" and meta["base_model"] == "nreimers/MiniLM-L6-H384-uncased"
    assert meta["datasets"] == ["s2orc", "code_search_net"] and meta["tags"] == ["sentence-transformers"]
    assert front_matter("---\ndatasets: [a, 'b']\n---\n") == {"datasets": ["a", "b"]}
    assert front_matter("# no front matter\nlicense: mit\n") == {}
    assert front_matter("---\nlicense: mit\n") == {}  # never closed: not front matter


def test_name_and_facts_from_the_model_card(tmp_path):
    folder = _model(tmp_path / "model", name_or_path="nreimers/MiniLM-L6-H384-uncased")
    facts = read_model_facts(folder)
    assert (facts.name.value, facts.name.source) == ("all-MiniLM-L6-v2", f"{folder / 'README.md'}: first heading")
    assert (facts.base_model.value, facts.base_model.source) == ("nreimers/MiniLM-L6-H384-uncased", f"{folder / 'README.md'}: base_model")
    assert (facts.license.value, facts.listed_datasets) == ("apache-2.0", ("s2orc", "code_search_net"))
    notes = fact_notes(facts, None)
    assert notes[0] == f'name = "all-MiniLM-L6-v2" ({folder / "README.md"}: first heading)'
    assert notes[-1].startswith(
        "the model card lists training data: s2orc, code_search_net (declare what the model was trained on with --training-dataset"
    )
    assert fact_notes(facts, "mine")[0] == 'name = "mine" (--name)'


@pytest.mark.parametrize(
    ("folder_name", "readme", "name_or_path", "name", "base"),
    [
        # model_name in the front matter wins over the heading
        ("model", "---\nmodel_name: my-encoder\n---\n# Something else\n", None, "my-encoder", None),
        # a generated card's heading is no name; its base_model is the base; the folder names the model
        (
            "codebert-ft",
            "---\nbase_model: microsoft/codebert-base\n---\n# SentenceTransformer based on microsoft/codebert-base\n",
            None,
            "codebert-ft",
            "microsoft/codebert-base",
        ),
        ("model", "# Model Card for acme/retriever-small\n", None, "acme/retriever-small", None),
        # no card: a meaningful folder name wins over _name_or_path, which is then the base it was trained from
        ("my-encoder", None, "bert-base-uncased", "my-encoder", "bert-base-uncased"),
        # a generic folder name ("model", as a package ships it): the hub id in _name_or_path names it
        ("model", None, "sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", None),
        # a local path in _name_or_path is neither a name nor a base
        ("model", None, "/home/me/out/checkpoint-500", "model", None),
    ],
)
def test_where_the_name_comes_from(tmp_path, folder_name, readme, name_or_path, name, base):
    facts = read_model_facts(_model(tmp_path / folder_name, readme=readme, name_or_path=name_or_path))
    assert facts.name.value == name
    assert (facts.base_model.value if facts.base_model else None) == base
    if facts.name.value == "model":
        assert facts.name.source == "the folder's name, a generic one: give --name"


def test_licence_other_uses_its_name_and_odd_values_are_left_out(tmp_path):
    facts = read_model_facts(_model(tmp_path / "a", readme="---\nlicense: other\nlicense_name: acme-research\n---\n"))
    assert facts.license.value == "acme-research" and facts.license.source.endswith("README.md: license_name")
    facts = read_model_facts(_model(tmp_path / "b", readme="---\nlicense: " + "x" * 500 + "\n---\n# " + "y" * 500 + "\n"))
    assert facts.license is None and facts.name.value == "b"  # too long to be a licence or a name


def test_model_card_and_manifest_are_valid_version_2(tmp_path):
    folder = _model(tmp_path / "model")
    settings = read_settings(folder)
    card = model_card(settings, read_model_facts(folder), dimension=384, parameters=22_713_216)
    assert card == {
        "base_model": "nreimers/MiniLM-L6-H384-uncased",
        "parameters": 22_713_216,
        "dimension": 384,
        "max_length": 256,
        "pooling": "mean",
        "license": "apache-2.0",
    }
    manifest = manifest_for(settings, "all-MiniLM-L6-v2", training=Training("fine-tuned", ("mini/train",)), card=card)
    assert manifest["manifest_version"] == 2 and manifest["training"] == {"setting": "fine-tuned", "datasets": ["mini/train"]}
    # what pack writes, the grader's own manifest reader (schema included) accepts
    (folder / "model.onnx").write_bytes(b"")
    (folder / "tokenizer.json").write_text("{}")
    (folder / "submission.json").write_text(json.dumps(manifest))
    loaded = load_manifest(folder)
    assert loaded.model_card == card and loaded.training == Training("fine-tuned", ("mini/train",))
    assert manifest_for(settings, "x", training=None, card={}).keys().isdisjoint({"training", "manifest_version", "model_card"})


def _pack(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", NO_TORCH_CLI, *args], stdin=stdin, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_without_a_setting_and_no_terminal_it_refuses_before_anything_runs(tmp_path):
    folder = _model(tmp_path / "model")
    out = tmp_path / "sub"
    result = _pack(str(folder), "--out", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines == [
        "error: say how the model was trained: --training-setting zero-shot or fine-tuned (no terminal to ask on)",
        "hint: grader pack MODEL --out DIR --training-setting zero-shot, or --training-setting fine-tuned --training-dataset NAME "
        "(repeatable); docs/pack.md says which applies",
    ]
    assert not out.exists()
    fine_tuned = _pack(str(folder), "--out", str(out), "--training-setting", "fine-tuned")
    assert fine_tuned.returncode == 2 and fine_tuned.stderr.startswith(
        "error: --training-setting fine-tuned needs at least one --training-dataset NAME"
    )
    bad = _pack(str(folder), "--out", str(out), "--training-setting", "supervised")
    assert bad.returncode == 2 and "'supervised' is not one of 'zero-shot', 'fine-tuned'" in bad.stderr
    # with the options given, it goes on to the packing itself (here: stopped at the missing extra, not at the labels)
    given = _pack(str(folder), "--out", str(out), "--training-setting", "fine-tuned", "--training-dataset", "mini/train")
    assert given.returncode == 2 and "\nerror: grader pack needs the 'pack' extra" in given.stderr, given.stderr
    assert 'pack: name = "all-MiniLM-L6-v2"' in given.stderr and "training" not in given.stderr.split("error:")[1]


def _read_until(fd: int, text: str, seen: bytearray, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        assert time.monotonic() < deadline, f"no {text!r} on the terminal; got {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            assert chunk, f"the terminal closed before {text!r}; got {bytes(seen)!r}"
            seen.extend(chunk)


@pytest.mark.slow
def test_on_a_terminal_it_asks_for_the_setting_and_datasets(tmp_path):
    folder = _model(tmp_path / "model")
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", NO_TORCH_CLI, str(folder), "--out", str(tmp_path / "sub")],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        close_fds=True,
    )
    os.close(secondary)
    seen = bytearray()
    try:
        _read_until(primary, "Training setting (zero-shot, fine-tuned):", seen)
        assert b"zero-shot: trained on none of the benchmark's training splits" in seen
        os.write(primary, b"supervised\n")  # not a choice: asked again
        _read_until(primary, "is not one of", seen)
        os.write(primary, b"fine-tuned\n")
        _read_until(primary, "Training datasets, comma-separated (at least one):", seen)
        os.write(primary, b"\n")  # fine-tuned needs one: asked again
        del seen[:]
        _read_until(primary, "Training datasets, comma-separated (at least one):", seen)
        os.write(primary, b"mini/train, mini/dev\n")
        _read_until(primary, "error: grader pack needs the 'pack' extra", seen)  # past the questions: on to the packing
        assert process.wait(60) == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)


def test_refusal_says_exactly_which_label_is_missing(tmp_path):
    """The server's 422 (and grader check's refusal) name the missing field and how to declare it."""
    folder = tmp_path / "s"
    folder.mkdir()

    def manifest(**training: object):
        (folder / "submission.json").write_text(json.dumps({"kind": "docker", "name": "x", "image": "i.tar", "mode": "retrieve", **training}))
        return load_manifest(folder)

    cases = {
        "none": (manifest(), "training", "missing: this competition requires a declared training setting"),
        "fine-tuned, no data": (manifest(training={"setting": "fine-tuned"}), "training.datasets", 'missing: a "fine-tuned" submission must name'),
    }
    for what, (found, field, words) in cases.items():
        missing = missing_training_labels(found)
        assert missing is not None and missing[0] == field and missing[1].startswith(words), what
        with pytest.raises(Exception, match=f"submission.json: {field}: missing: "):
            check_manifest_rules(found, path=Path("submission.json"), kinds=("docker",), require_training_labels=True)
        check_manifest_rules(found, path=Path("submission.json"), kinds=("docker",), require_training_labels=False)
    assert "grader pack --training-setting writes it" in missing_training_labels(manifest())[1]
    for fine in ({"setting": "zero-shot"}, {"setting": "zero-shot", "datasets": ["s2orc"]}, {"setting": "fine-tuned", "datasets": ["mini/train"]}):
        assert missing_training_labels(manifest(training=fine)) is None
