"""A grade does not depend on file order or thread count.

The example ONNX encoder (``submissions_example/onnx-lsa``) is graded in-process
on the bundled ``mini`` tasks, once as shipped and then with ``corpus.jsonl`` and
``queries.jsonl`` shuffled (and the qrels rows too), with one and with two
threads (onnxruntime's and faiss's). Every measure of every task must be
bit-identical. Before canonical encoding order and exact search, about half of
the measures differed in the fourth decimal.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.main import cli

pytestmark = pytest.mark.slow  # a module-scoped fixture grades with `grader run` (an encoder child process)

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "grader" / "bundled" / "mini"
EXAMPLE = ROOT / "submissions_example" / "onnx-lsa"
TASKS = ["text2code", "code2text"]


def _shuffled_copy(target: Path, seed: int) -> Path:
    """mini with every line-oriented file of the graded tasks in a different order."""
    rng = random.Random(seed)
    spec = json.loads((MINI / "benchmark.json").read_text(encoding="utf-8"))
    spec["tasks"] = TASKS
    target.mkdir(parents=True)
    (target / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    for task in TASKS:
        (target / task / "qrels").mkdir(parents=True)
        for name in ("corpus.jsonl", "queries.jsonl"):
            with gzip.open(MINI / task / f"{name}.gz", "rt", encoding="utf-8") as handle:
                lines = handle.readlines()
            rng.shuffle(lines)
            (target / task / name).write_text("".join(lines), encoding="utf-8")
        for qrels in (MINI / task / "qrels").iterdir():
            header, *rows = qrels.read_text(encoding="utf-8").splitlines(keepends=True)
            rng.shuffle(rows)
            (target / task / "qrels" / qrels.name).write_text(header + "".join(rows), encoding="utf-8")
    return target


def _grade(benchmark: Path, out: Path, threads: int) -> dict:
    result = CliRunner().invoke(
        cli,
        [
            "run",
            str(EXAMPLE),
            "--benchmark",
            str(benchmark),
            "--out",
            str(out),
            "--threads",
            str(threads),
            "--sandbox",
            "none",
            "--quiet",
            "--tasks",
            ",".join(TASKS),
        ],
    )
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {name: report["tasks"][name]["measures"] for name in TASKS}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("mini")
    spec = json.loads((MINI / "benchmark.json").read_text(encoding="utf-8"))
    spec["tasks"] = TASKS
    for task in TASKS:
        shutil.copytree(MINI / task, folder / "mini" / task)
    (folder / "mini" / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return _grade(folder / "mini", folder / "out", threads=1)


def test_the_shipped_order_gives_discriminating_measures(shipped: dict) -> None:
    for measures in shipped.values():
        assert 0.05 < measures["NDCG@10"] < 0.99


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "threads"), [(1, 1), (2, 2)])
def test_shuffled_files_and_threads_give_bit_identical_measures(tmp_path: Path, shipped: dict, seed: int, threads: int) -> None:
    benchmark = _shuffled_copy(tmp_path / "shuffled", seed)
    measures = _grade(benchmark, tmp_path / "out", threads=threads)
    for task in TASKS:
        for name, value in shipped[task].items():
            assert measures[task][name] == value, (task, name, measures[task][name], value)  # bit for bit, not approx
