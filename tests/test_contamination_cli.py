"""``grader check --training-sketch`` (public split, every figure) and ``grader run --training-sketch`` (the
released figure, printed beside the report and never written into it), on a benchmark written here."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.cli_support import invoke
from tests.conftest import write_task
from tests.contamination_support import disguised_copy, snippet
from tests.onnx_models import embedding_table, onnx_submission, words

pytestmark = pytest.mark.slow  # the in-process ONNX backend encodes in a child process

DEV, TEST = 20, 40
PLANTED_DEV, PLANTED_TEST = 7, 23  # copies of that many relevant functions of each split, in the sketch


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("contamination")
    rng = random.Random(11)
    functions = [snippet(rng, rng.randint(6, 12)) for _ in range(DEV + TEST)]
    corpus = [{"_id": f"d{i}", "title": "", "text": item.render()} for i, item in enumerate(functions)]
    queries = [{"_id": f"q{i}", "text": words(i % 50, (i + 1) % 50)} for i in range(DEV + TEST)]
    qrels = {
        "dev": [(f"q{i}", f"d{i}", 1) for i in range(DEV)],
        "test": [(f"q{i}", f"d{i}", 1) for i in range(DEV, DEV + TEST)],
    }
    bench = root / "bench"
    write_task(bench / "code", corpus=corpus, queries=queries, qrels=qrels)
    spec = {"name": "tiny", "version": "1", "primary_measure": "NDCG@10", "measures": ["NDCG@10"], "tasks": ["code"]}
    (bench / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    training = root / "training.jsonl"
    planted = functions[:PLANTED_DEV] + functions[DEV : DEV + PLANTED_TEST]
    others = [snippet(rng, 9).render() for _ in range(30)]
    training.write_text("".join(json.dumps({"text": text}) + "\n" for text in [*(disguised_copy(item, rng) for item in planted), *others]))
    sketch = root / "training.sketch"
    invoke("sketch-training", training, "--out", sketch, "--quiet")
    manifest = {"training": {"setting": "fine-tuned", "datasets": ["training.jsonl"]}}
    submission = onnx_submission(root / "model", table=embedding_table(dim=8, seed=3), manifest=manifest)
    return {"bench": bench, "sketch": sketch, "submission": submission, "root": root}


def test_check_shows_every_figure_of_the_public_split(world: dict[str, Path]) -> None:
    result = invoke("check", world["submission"], "--benchmark", world["bench"], "--sandbox", "none", "--training-sketch", world["sketch"])
    expected = (
        f"code (dev): {PLANTED_DEV} of {DEV} test queries touched ({PLANTED_DEV / DEV:.1%}); "
        f"0 query texts and {PLANTED_DEV} of {DEV} relevant documents found; 0 test queries too short to audit"
    )
    assert expected in result.stdout
    as_json = json.loads(
        invoke(
            "check", world["submission"], "--benchmark", world["bench"], "--sandbox", "none", "--training-sketch", world["sketch"], "--json"
        ).stdout
    )
    (figures,) = as_json["contamination"]
    assert (figures["split"], figures["test_queries"], figures["touched"], figures["documents_found"]) == ("dev", DEV, PLANTED_DEV, PLANTED_DEV)


def test_run_prints_the_released_figure_beside_a_report_that_does_not_carry_it(world: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = invoke(
        "run",
        world["submission"],
        "--benchmark",
        world["bench"],
        "--sandbox",
        "none",
        "--threads",
        "1",
        "--out",
        out,
        "--training-sketch",
        world["sketch"],
    )
    step = 10  # max(10, ceil(40 / 100)): the release rule's step for 40 test queries
    assert f"code (test): at least {PLANTED_TEST // step * step} of {TEST} test queries touched" in result.stdout
    assert "not part of the report" in result.stdout
    report_text = (out / "report.json").read_text(encoding="utf-8")
    assert "contamination" not in report_text and "touched" not in report_text


def test_a_bad_sketch_stops_run_and_check_before_anything_is_graded(world: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.sketch"
    bad.write_bytes(b"GRSKETCH" + b"\x00" * 100)
    out = tmp_path / "run"
    result = invoke("run", world["submission"], "--benchmark", world["bench"], "--sandbox", "none", "--out", out, "--training-sketch", bad, expect=2)
    assert f"{bad}: format_version: format version 0" in result.stderr
    assert not out.exists()
    result = invoke("check", world["submission"], "--benchmark", world["bench"], "--sandbox", "none", "--training-sketch", bad, expect=2)
    assert f"{bad}: format_version" in result.stderr
