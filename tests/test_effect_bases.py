"""``grader effect`` with several base encoders: CAT's Average_EffectMRR per dataset over base models x dimensions.

The CAT paper reports, per dataset, the mean EffectMRR over two base models and two
PCA dimensions (4 configurations). Expected values are worked out by hand (native
dimension, 2-D vectors) or derived independently with numpy and pytrec_eval.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.data.registry import resolve_benchmark
from grader.effect import compute_effect
from grader.errors import UsageError
from tests.test_effect import HAND_A, HAND_B, _benchmark, _normalize, _pca_numpy, _qrels_dict, _random_task, _run_folder, _trec_rr


def _effect(bench: Path, bases: list[Path], augmented: Path, weight: float, **kwargs) -> dict:
    return compute_effect(resolve_benchmark(str(bench)), bases, augmented, weight, **kwargs)


def _two_base_setup(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Two tasks (HAND_A as 'alpha', HAND_B as 'beta'), bases 'gcb' and 'unix', one augmented run.

    With W = 0.5, by hand (ties broken by doc id descending):
      alpha, gcb  = HAND_A's base:      MRR_org .75, MRR_com 1    -> +0.25
      alpha, unix = HAND_A's augmented: cos_b = [0,1,0],[1,0,1] -> q1 d2 first, q2 d3 (tie, higher id) first:
                                        MRR_org 1; minmax is the identity, S = cos_b -> MRR_com 1 -> 0
      beta,  gcb  = HAND_B's base:      q1 S = .5*[.5,.8,.5] + .5*[0,0,1] = [.25,.4,.75] -> d3 first;
                                        q2 S = .5*[1,.9,0] + .5*[1,1,0] = [1,.95,0] -> d1 first: MRR_com 1;
                                        MRR_org .75 (q1's d3 ties d1 at 0 and comes 2nd) -> +0.25
      beta,  unix = HAND_B's base too:  -> +0.25
    Average_EffectMRR: alpha (0.25 + 0) / 2 = 0.125, beta (0.25 + 0.25) / 2 = 0.25; overall 0.1875.
    """
    bench = _benchmark(tmp_path / "bench", {"alpha": HAND_A, "beta": HAND_B})
    ids = {name: (case["queries"], case["docs"]) for name, case in (("alpha", HAND_A), ("beta", HAND_B))}
    gcb = _run_folder(tmp_path / "gcb", bench, {"alpha": (*ids["alpha"], *HAND_A["base"]), "beta": (*ids["beta"], *HAND_B["base"])}, name="gcb")
    unix = _run_folder(
        tmp_path / "unix", bench, {"alpha": (*ids["alpha"], *HAND_A["augmented"]), "beta": (*ids["beta"], *HAND_B["base"])}, name="unix"
    )
    aug = _run_folder(
        tmp_path / "aug", bench, {"alpha": (*ids["alpha"], *HAND_A["augmented"]), "beta": (*ids["beta"], *HAND_B["augmented"])}, name="cat"
    )
    return bench, gcb, unix, aug


def test_hand_worked_average_over_two_bases(tmp_path):
    bench, gcb, unix, aug = _two_base_setup(tmp_path)
    result = _effect(bench, [gcb, unix], aug, 0.5)
    table = {(c["task"], c["base"]): (c["mrr_org"], c["mrr_com"], c["effect_mrr"]) for c in result["configurations"]}
    assert table == {
        ("alpha", "gcb"): (0.75, 1.0, 0.25),
        ("alpha", "unix"): (1.0, 1.0, 0.0),
        ("beta", "gcb"): (0.75, 1.0, 0.25),
        ("beta", "unix"): (0.75, 1.0, 0.25),
    }
    assert result["tasks"] == [
        {"task": "alpha", "configurations": 2, "average_effect_mrr": 0.125},
        {"task": "beta", "configurations": 2, "average_effect_mrr": 0.25},
    ]
    assert result["average_effect_mrr"] == 0.1875
    assert [b["label"] for b in result["bases"]] == ["gcb", "unix"]
    assert [b["report"] for b in result["bases"]] == [str(gcb / "report.json"), str(unix / "report.json")]
    assert "base" not in result and "base" not in result["labels"]  # bases are listed under "bases" only
    assert result["labels"]["augmented"] == {"training": "cat"}


def test_four_configurations_per_dataset_as_in_the_paper(tmp_path):
    """2 bases x 2 dimensions: each task's average is (sum of its 4 EffectMRRs) / 4, each checked independently."""
    rng = np.random.default_rng(21)
    specs = {"t1": _random_task(rng, "x", 12, 40), "t2": _random_task(rng, "y", 9, 30)}
    bench = _benchmark(tmp_path / "bench", specs)
    vectors: dict[str, dict] = {"b1": {}, "b2": {}, "aug": {}}
    for name, spec in specs.items():
        n_q, n_d = len(spec["queries"]), len(spec["docs"])
        for role, dim in (("b1", 10), ("b2", 6), ("aug", 8)):
            vectors[role][name] = (spec["queries"], spec["docs"], rng.standard_normal((n_q, dim)), rng.standard_normal((n_d, dim)))
    folders = {role: _run_folder(tmp_path / role, bench, vectors[role], name=role) for role in vectors}
    weight = 0.35
    result = _effect(bench, [folders["b1"], folders["b2"]], folders["aug"], weight, dimensions=(3, 7))
    configs = result["configurations"]
    assert [(c["task"], c["base"], c["dimension"]) for c in configs] == [(t, b, d) for t in ("t1", "t2") for b in ("b1", "b2") for d in (3, 7)]
    # Each configuration independently: own PCA per side (d >= native: no reduction), global min-max, trec ties.
    for c in configs:
        spec = specs[c["task"]]
        qids, dids, qrels = spec["queries"], spec["docs"], _qrels_dict(spec)
        sides = []
        for role in (c["base"], "aug"):
            q, d = (np.asarray(x, np.float32).astype(np.float64) for x in vectors[role][c["task"]][2:])
            sides.append(_pca_numpy(q, d, c["dimension"]) if c["dimension"] < q.shape[1] else (_normalize(q), _normalize(d)))
        cos_b, cos_a = sides[0][0] @ sides[0][1].T, sides[1][0] @ sides[1][1].T
        combined = (1 - weight) * (cos_b - cos_b.min()) / (cos_b.max() - cos_b.min()) + weight * cos_a
        assert c["mrr_org"] == pytest.approx(_trec_rr(qrels, qids, dids, cos_b), abs=1e-12)
        assert c["mrr_com"] == pytest.approx(_trec_rr(qrels, qids, dids, combined), abs=1e-12)
    assert [c["pca_applied"]["base"] for c in configs if c["task"] == "t1"] == [True, True, True, False]
    for entry in result["tasks"]:
        mine = [c["effect_mrr"] for c in configs if c["task"] == entry["task"]]
        assert entry["configurations"] == 4
        assert entry["average_effect_mrr"] == pytest.approx(sum(mine) / 4, abs=1e-15)
    assert result["average_effect_mrr"] == pytest.approx(sum(c["effect_mrr"] for c in configs) / 8, abs=1e-15)
    # One base at a time gives the same configurations: bases do not interact.
    alone = _effect(bench, [folders["b2"]], folders["aug"], weight, dimensions=(3, 7))
    assert [c["effect_mrr"] for c in alone["configurations"]] == [c["effect_mrr"] for c in configs if c["base"] == "b2"]


def test_one_base_has_the_layout_of_several(tmp_path):
    bench, gcb, _unix, aug = _two_base_setup(tmp_path)
    as_path = compute_effect(resolve_benchmark(str(bench)), gcb, aug, 0.5)
    as_list = _effect(bench, [gcb], aug, 0.5)
    assert as_path == as_list
    assert "base" not in as_path and [b["report"] for b in as_path["bases"]] == [str(gcb / "report.json")]
    assert as_path["labels"] == {"augmented": {"training": "cat"}} and as_path["bases"][0]["labels"] == {"training": "gcb"}
    assert as_path["average_effect_mrr"] == 0.25 and [t["average_effect_mrr"] for t in as_path["tasks"]] == [0.25, 0.25]


def test_duplicate_names_get_distinct_labels_and_duplicate_folders_are_refused(tmp_path):
    bench, gcb, unix, aug = _two_base_setup(tmp_path)
    report = json.loads((unix / "report.json").read_text())
    report["subject"]["name"] = "gcb"
    (unix / "report.json").write_text(json.dumps(report))
    result = _effect(bench, [gcb, unix], aug, 0.5)
    assert [b["label"] for b in result["bases"]] == ["gcb", "gcb#2"]
    with pytest.raises(UsageError, match="is given twice"):
        _effect(bench, [gcb, gcb / "report.json"], aug, 0.5)


def test_every_base_must_have_scored_every_task(tmp_path):
    bench, gcb, unix, aug = _two_base_setup(tmp_path)
    report = json.loads((unix / "report.json").read_text())
    del report["tasks"]["beta"]
    (unix / "report.json").write_text(json.dumps(report))
    with pytest.raises(UsageError, match=r"--base: .*unix/report.json did not grade task 'beta'"):
        _effect(bench, [gcb, unix], aug, 0.5)


def test_cli_two_bases_json_and_percent_table(tmp_path):
    bench, gcb, unix, aug = _two_base_setup(tmp_path)
    runner = CliRunner()
    args = ["effect", "--base", str(gcb), "--base", str(unix), "--augmented", str(aug), "--weight", "0.5", "--benchmark", str(bench)]
    out = tmp_path / "effect.json"
    result = runner.invoke(cli, [*args, "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads(out.read_text())
    assert data["average_effect_mrr"] == 0.1875 and len(data["configurations"]) == 4
    table = runner.invoke(cli, args)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert "Average_EffectMRR per task, over 2 base model(s) x 1 dimension(s):" in lines
    assert any(line.split() == ["alpha", "+12.50", "(2", "configuration(s))"] for line in lines)
    assert any(line.split() == ["beta", "+25.00", "(2", "configuration(s))"] for line in lines)
    assert lines[-1] == "Average_EffectMRR over 2 task(s) = +18.75 (mean of the task averages; 4 configuration(s))"
    assert any(line.split() == ["alpha", "unix", "native", "n/n", "100.00", "100.00", "+0.00"] for line in lines)
    assert math.isclose(data["tasks"][0]["average_effect_mrr"] * 100, 12.5)
