"""``grader effect``: EffectMRR (CAT, Formula 6) from two kept-embedding run folders.

Embeddings are written by hand (with the grader's own ``save_embeddings``) beside a
tiny benchmark, so expected values are derived by hand or independently with numpy
and pytrec_eval; one test runs ``grader run --keep-embeddings`` on real ONNX models.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
from click.testing import CliRunner

from grader.cli.main import cli
from grader.data.registry import resolve_benchmark
from grader.effect import compute_effect, global_min_max, top_k_trec
from grader.errors import DataError, UsageError
from grader.grading.runner import save_embeddings
from tests.conftest import write_task
from tests.onnx_models import embedding_table, onnx_submission, words

# --------------------------------------------------------------------------- helpers


def _benchmark(root: Path, tasks: dict[str, dict], *, primary: str | None = None) -> Path:
    """A benchmark folder with ``tasks`` ({name: {"docs", "queries", "qrels"}}), optionally a benchmark.json."""
    for name, spec in tasks.items():
        write_task(
            root / name,
            corpus=[{"_id": d, "title": "", "text": f"text of {d}"} for d in spec["docs"]],
            queries=[{"_id": q, "text": f"text of {q}"} for q in spec["queries"]],
            qrels={"test": spec["qrels"]},
        )
    if primary is not None:
        spec_json = {"name": root.name, "version": "1", "primary_measure": primary, "tasks": sorted(tasks)}
        (root / "benchmark.json").write_text(json.dumps(spec_json), encoding="utf-8")
    return root


def _run_folder(out: Path, bench: Path, vectors: dict[str, tuple], *, name: str, labels: dict | None = None) -> Path:
    """A ``grader run --keep-embeddings``-shaped folder: report.json + embeddings/<task>/.

    ``vectors`` maps task -> (query ids, doc ids, query vectors, corpus vectors), in row order.
    """
    benchmark = resolve_benchmark(str(bench))
    tasks = {}
    for task_name, (qids, dids, queries, corpus) in vectors.items():
        save_embeddings(out / "embeddings" / task_name, list(qids), list(dids), np.asarray(queries, np.float32), np.asarray(corpus, np.float32))
        digest = benchmark.task(task_name).split_digest("test")
        tasks[task_name] = {
            "split": "test",
            "data_digest": {"sha256": digest},
            "status": "scored",
            "failure": None,
            "measures": {"NDCG@10": 0.5},
            "queries": {"judged": len(qids), "answered": len(qids), "missing": 0, "extra": 0},
        }
    report = {  # schema-valid; the scores themselves are not what EffectMRR reads
        "schema_version": "1",
        "grader": {"name": "grader", "version": "test"},
        "benchmark": {"name": benchmark.name, "version": benchmark.spec.version, "primary_measure": benchmark.spec.primary_measure},
        "subject": {"kind": "onnx", "name": name, "digest": {"sha256": "0" * 64}},
        "policy": "strict",
        "tasks": tasks,
        "aggregate": {"measure": benchmark.spec.primary_measure, "score": None, "complete": False, "groups": {}},
        "sandbox": None,
        "labels": labels if labels is not None else {"training": name},
        "started_at": "2025-01-01T00:00:00Z",
        "finished_at": "2025-01-01T00:00:00Z",
    }
    (out / "report.json").write_text(json.dumps(report), encoding="utf-8")
    return out


def _normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _trec_rr(qrels: dict[str, dict[str, int]], qids: list[str], dids: list[str], scores: np.ndarray) -> float:
    """MRR (uncut; corpus < 1000) with pytrec_eval's recip_rank, from a full score matrix."""
    run = {q: {d: float(scores[i, j]) for j, d in enumerate(dids)} for i, q in enumerate(qids)}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run)
    return math.fsum(per_query[q]["recip_rank"] for q in qrels) / len(qrels)


def _hand_rr(qrels: dict[str, dict[str, int]], qids: list[str], dids: list[str], scores: np.ndarray) -> float:
    """MRR by hand: sort by (score desc, doc id desc), 1 / rank of the first relevant."""
    total = []
    for i, q in enumerate(qids):
        order = sorted(range(len(dids)), key=lambda j: (-scores[i, j], [-ord(c) for c in dids[j]]))
        ranks = [r for r, j in enumerate(order, start=1) if qrels[q].get(dids[j], 0) >= 1]
        total.append(1 / ranks[0] if ranks else 0.0)
    return math.fsum(total) / len(total)


def _pca_numpy(queries: np.ndarray, corpus: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """An independent PCA (eigendecomposition of the covariance); cosines do not depend on component signs."""
    stacked = np.vstack([queries, corpus]).astype(np.float64)
    mean = stacked.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov((stacked - mean).T))
    top = vectors[:, np.argsort(values)[::-1][:d]]
    return _normalize((queries - mean) @ top), _normalize((corpus - mean) @ top)


# Hand case A: the combination lifts q1's relevant document from rank 2 to rank 1.
#   base cos: q1 [1, .8, 0], q2 [0, .6, 1]   (global min 0, max 1: minmax is the identity)
#   aug  cos: q1 [0, 1, 0],  q2 [1, 0, 1]
#   W = .5:  S q1 = [.5, .9, 0] -> d2 first;  S q2 = [.5, .3, 1] -> d3 first
HAND_A = {
    "docs": ["d1", "d2", "d3"],
    "queries": ["q1", "q2"],
    "qrels": [("q1", "d2", 1), ("q2", "d3", 1)],
    "base": ([[1, 0], [0, 1]], [[1, 0], [0.8, 0.6], [0, 1]]),
    "augmented": ([[1, 0], [0, 1]], [[0, 1], [1, 0], [0, 1]]),
}

# Hand case B: global min-max and per-query min-max rank q1 differently.
#   base cos: q1 [0, .6, 0], q2 [1, .8, -1]   (global min -1, max 1)
#   aug  cos: q1 [0, 0, 1],  q2 [1, 1, 0]
#   W = .4, global:    S q1 = .6*[.5, .8, .5] + .4*[0, 0, 1] = [.3, .48, .7] -> d3 (relevant) first
#           per query: S q1 = .6*[0, 1, 0]    + .4*[0, 0, 1] = [0, .6, .4]   -> d3 second
HAND_B = {
    "docs": ["d1", "d2", "d3"],
    "queries": ["q1", "q2"],
    "qrels": [("q1", "d3", 1), ("q2", "d1", 1)],
    "base": ([[0, 1], [1, 0]], [[1, 0], [0.8, 0.6], [-1, 0]]),
    "augmented": ([[0, 1], [1, 0]], [[1, 0], [1, 0], [0, 1]]),
}


def _hand_setup(tmp_path: Path, case: dict) -> tuple[Path, Path, Path]:
    bench = _benchmark(tmp_path / "bench", {"toy": case})
    ids = (case["queries"], case["docs"])
    base = _run_folder(tmp_path / "base", bench, {"toy": (*ids, *case["base"])}, name="base-model")
    augmented = _run_folder(tmp_path / "aug", bench, {"toy": (*ids, *case["augmented"])}, name="aug-model")
    return bench, base, augmented


def _effect(bench: Path, base: Path, augmented: Path, weight: float, **kwargs) -> dict:
    return compute_effect(resolve_benchmark(str(bench)), base, augmented, weight, **kwargs)


def _random_task(rng: np.random.Generator, prefix: str, n_queries: int, n_docs: int) -> dict:
    docs = [f"{prefix}d{i:03d}" for i in range(n_docs)]
    queries = [f"{prefix}q{i:02d}" for i in range(n_queries)]
    qrels = [(q, docs[int(j)], 1) for q in queries for j in rng.choice(n_docs, size=2, replace=False)]
    return {"docs": docs, "queries": queries, "qrels": qrels}


def _qrels_dict(spec: dict) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q, d, r in spec["qrels"]:
        out.setdefault(q, {})[d] = r
    return out


# --------------------------------------------------------------------------- hand-derived cases


def test_hand_case_combination_changes_rank(tmp_path):
    bench, base, augmented = _hand_setup(tmp_path, HAND_A)
    result = _effect(bench, base, augmented, 0.5)
    [config] = result["configurations"]
    assert config["task"] == "toy" and config["dimension"] is None
    assert config["pca_applied"] == {"base": False, "augmented": False}
    assert config["mrr_org"] == 0.75  # q1: d1 before d2 -> 1/2; q2: d3 first -> 1
    assert config["mrr_com"] == 1.0
    assert config["effect_mrr"] == 0.25
    assert result["average_effect_mrr"] == 0.25
    assert result["measure"] == "MRR@1000"
    assert config["base_cosine_range"] == pytest.approx([0.0, 1.0], abs=1e-7)


def test_global_min_max_not_per_query(tmp_path):
    bench, base, augmented = _hand_setup(tmp_path, HAND_B)
    weight = 0.4
    result = _effect(bench, base, augmented, weight)
    [config] = result["configurations"]
    assert config["base_cosine_range"] == pytest.approx([-1.0, 1.0], abs=1e-7)
    assert config["mrr_org"] == 0.75  # q1: d2, then the tie d1/d3 at 0 -> d3 (higher id) 2nd; q2: d1 first
    assert config["mrr_com"] == 1.0
    assert config["effect_mrr"] == 0.25
    # The test discriminates: per-query min-max would rank q1's d3 second (MRR 0.75).
    qids, dids, qrels = HAND_B["queries"], HAND_B["docs"], _qrels_dict(HAND_B)
    cos_b = _normalize(HAND_B["base"][0]) @ _normalize(HAND_B["base"][1]).T
    cos_a = _normalize(HAND_B["augmented"][0]) @ _normalize(HAND_B["augmented"][1]).T
    low, high = cos_b.min(axis=1, keepdims=True), cos_b.max(axis=1, keepdims=True)
    per_row = (1 - weight) * (cos_b - low) / (high - low) + weight * cos_a
    assert _hand_rr(qrels, qids, dids, per_row) == 0.75
    glob = (1 - weight) * (cos_b - cos_b.min()) / (cos_b.max() - cos_b.min()) + weight * cos_a
    assert _hand_rr(qrels, qids, dids, glob) == 1.0


def test_global_min_max_over_blocks_and_tie_cut():
    rng = np.random.default_rng(3)
    queries, corpus = _normalize(rng.standard_normal((37, 5))), _normalize(rng.standard_normal((23, 5)))
    full = queries @ corpus.T
    assert global_min_max(queries, corpus, block_elements=23 * 4) == (full.min(), full.max())
    # A tie group straddling the cut keeps the highest doc ids (trec order), wherever they sit.
    block = np.array([[0.9, 0.5, 0.5, 0.5, 0.1]])
    doc_ranks = np.array([0, 4, 1, 3, 2])  # byte-order ranks of the columns' ids
    scores, indices = top_k_trec(block, 3, doc_ranks)
    assert sorted(indices[0].tolist()) == [0, 1, 3] and sorted(scores[0].tolist()) == [0.5, 0.5, 0.9]


# --------------------------------------------------------------------------- W = 0 and W = 1


def test_weight_zero_gives_exactly_zero_with_ties(tmp_path):
    rng = np.random.default_rng(11)
    spec = _random_task(rng, "", 12, 40)
    base_q, base_c = rng.standard_normal((12, 8)), rng.standard_normal((40, 8))
    base_c[5:10] = base_c[0]  # exact ties, including around relevant documents
    base_c[20:24] = -base_c[3]
    spec["qrels"] += [(q, spec["docs"][7], 1) for q in spec["queries"][:4]]
    spec["qrels"] = list({(q, d): (q, d, r) for q, d, r in spec["qrels"]}.values())
    bench = _benchmark(tmp_path / "bench", {"toy": spec})
    ids = (spec["queries"], spec["docs"])
    base = _run_folder(tmp_path / "base", bench, {"toy": (*ids, base_q, base_c)}, name="b")
    augmented = _run_folder(tmp_path / "aug", bench, {"toy": (*ids, rng.standard_normal((12, 6)), rng.standard_normal((40, 6)))}, name="a")
    result = _effect(bench, base, augmented, 0.0, dimensions=(3, 5, 100))
    assert [c["dimension"] for c in result["configurations"]] == [3, 5, 100]
    for config in result["configurations"]:
        assert config["mrr_com"] == config["mrr_org"]
        assert config["effect_mrr"] == 0.0
    assert result["average_effect_mrr"] == 0.0


def test_weight_one_is_the_augmented_ranking_alone(tmp_path):
    rng = np.random.default_rng(5)
    spec = _random_task(rng, "", 15, 60)
    bench = _benchmark(tmp_path / "bench", {"toy": spec})
    qids, dids, qrels = spec["queries"], spec["docs"], _qrels_dict(spec)
    base_q, base_c = rng.standard_normal((15, 10)), rng.standard_normal((60, 10))
    aug_q, aug_c = rng.standard_normal((15, 7)).astype(np.float32), rng.standard_normal((60, 7)).astype(np.float32)
    # The augmented run stores its rows in another order: they are aligned by id.
    q_perm, d_perm = rng.permutation(15), rng.permutation(60)
    base = _run_folder(tmp_path / "base", bench, {"toy": (qids, dids, base_q, base_c)}, name="b")
    augmented = _run_folder(
        tmp_path / "aug", bench, {"toy": ([qids[i] for i in q_perm], [dids[i] for i in d_perm], aug_q[q_perm], aug_c[d_perm])}, name="a"
    )
    result = _effect(bench, base, augmented, 1.0, dimensions=(4, 64))
    native, reduced = result["configurations"][1], result["configurations"][0]
    assert native["pca_applied"] == {"base": False, "augmented": False}
    assert native["dimensions"] == {"base": 10, "augmented": 7}
    cos_a = _normalize(aug_q) @ _normalize(aug_c).T
    assert native["mrr_com"] == pytest.approx(_trec_rr(qrels, qids, dids, cos_a), abs=1e-12)
    assert native["mrr_org"] == pytest.approx(_trec_rr(qrels, qids, dids, _normalize(base_q) @ _normalize(base_c).T), abs=1e-12)
    assert reduced["pca_applied"] == {"base": True, "augmented": True}
    pq, pc = _pca_numpy(aug_q, aug_c, 4)
    assert reduced["mrr_com"] == pytest.approx(_trec_rr(qrels, qids, dids, pq @ pc.T), abs=1e-12)
    bq, bc = _pca_numpy(base_q, base_c, 4)
    assert reduced["mrr_org"] == pytest.approx(_trec_rr(qrels, qids, dids, bq @ bc.T), abs=1e-12)


def test_combination_matches_numpy_for_intermediate_weight(tmp_path):
    rng = np.random.default_rng(8)
    spec = _random_task(rng, "", 20, 50)
    bench = _benchmark(tmp_path / "bench", {"toy": spec})
    qids, dids, qrels = spec["queries"], spec["docs"], _qrels_dict(spec)
    base_q, base_c, aug_q, aug_c = (rng.standard_normal(shape) for shape in ((20, 6), (50, 6), (20, 6), (50, 6)))
    base = _run_folder(tmp_path / "base", bench, {"toy": (qids, dids, base_q, base_c)}, name="b")
    augmented = _run_folder(tmp_path / "aug", bench, {"toy": (qids, dids, aug_q, aug_c)}, name="a")
    weight = 0.3
    [config] = _effect(bench, base, augmented, weight)["configurations"]
    cos_b = _normalize(base_q.astype(np.float32)) @ _normalize(base_c.astype(np.float32)).T
    cos_a = _normalize(aug_q.astype(np.float32)) @ _normalize(aug_c.astype(np.float32)).T
    combined = (1 - weight) * (cos_b - cos_b.min()) / (cos_b.max() - cos_b.min()) + weight * cos_a
    assert config["mrr_com"] == pytest.approx(_trec_rr(qrels, qids, dids, combined), abs=1e-12)
    assert config["mrr_com"] == pytest.approx(_hand_rr(qrels, qids, dids, combined), abs=1e-12)
    assert config["effect_mrr"] == pytest.approx(config["mrr_com"] - _trec_rr(qrels, qids, dids, cos_b), abs=1e-12)


def test_dimensions_are_separate_configurations(tmp_path):
    rng = np.random.default_rng(2)
    specs = {"alpha": _random_task(rng, "a", 10, 30), "beta": _random_task(rng, "b", 8, 25)}
    bench = _benchmark(tmp_path / "bench", specs)
    base_vectors, aug_vectors = {}, {}
    for name, spec in specs.items():
        n_q, n_d = len(spec["queries"]), len(spec["docs"])
        base_vectors[name] = (spec["queries"], spec["docs"], rng.standard_normal((n_q, 12)), rng.standard_normal((n_d, 12)))
        aug_vectors[name] = (spec["queries"], spec["docs"], rng.standard_normal((n_q, 9)), rng.standard_normal((n_d, 9)))
    base = _run_folder(tmp_path / "base", bench, base_vectors, name="b", labels={"training": "zero-shot"})
    augmented = _run_folder(tmp_path / "aug", bench, aug_vectors, name="a", labels={"training": "fine-tuned"})
    result = _effect(bench, base, augmented, 0.6, dimensions=(3, 10))
    configs = result["configurations"]
    assert [(c["task"], c["dimension"]) for c in configs] == [("alpha", 3), ("alpha", 10), ("beta", 3), ("beta", 10)]
    assert [c["pca_applied"] for c in configs] == [{"base": True, "augmented": True}, {"base": True, "augmented": False}] * 2
    assert [c["dimensions"] for c in configs] == [{"base": 3, "augmented": 3}, {"base": 10, "augmented": 9}] * 2
    effects = [c["effect_mrr"] for c in configs]
    assert result["average_effect_mrr"] == math.fsum(effects) / 4
    for c in configs:
        assert c["effect_mrr"] == c["mrr_com"] - c["mrr_org"]
    assert result["labels"] == {"augmented": {"training": "fine-tuned"}} and result["bases"][0]["labels"] == {"training": "zero-shot"}
    assert result["bases"][0]["subject"]["name"] == "b" and result["augmented"]["subject"]["name"] == "a"
    # --tasks picks a subset; the benchmark's MRR primary measure sets the cutoff.
    only_beta = _effect(bench, base, augmented, 0.6, dimensions=(3,), tasks=["beta"])
    assert [(c["task"], c["dimension"]) for c in only_beta["configurations"]] == [("beta", 3)]
    assert only_beta["configurations"][0]["mrr_com"] == configs[2]["mrr_com"]


def test_primary_mrr_measure_is_used(tmp_path):
    bench = _benchmark(tmp_path / "bench", {"toy": HAND_A}, primary="MRR@1")
    ids = (HAND_A["queries"], HAND_A["docs"])
    base = _run_folder(tmp_path / "base", bench, {"toy": (*ids, *HAND_A["base"])}, name="b")
    augmented = _run_folder(tmp_path / "aug", bench, {"toy": (*ids, *HAND_A["augmented"])}, name="a")
    result = _effect(bench, base, augmented, 0.5)
    assert result["measure"] == "MRR@1"
    [config] = result["configurations"]
    assert (config["mrr_org"], config["mrr_com"]) == (0.5, 1.0)  # q1's relevant is 2nd: 0 at cutoff 1


# --------------------------------------------------------------------------- refusals


def test_mismatched_ids_are_refused(tmp_path):
    bench, base, augmented = _hand_setup(tmp_path, HAND_A)
    ids_path = augmented / "embeddings" / "toy" / "ids.json"
    ids = json.loads(ids_path.read_text())
    ids_path.write_text(json.dumps({"queries": ids["queries"], "corpus": ["d1", "d2", "dX"]}))
    with pytest.raises(DataError, match=r"--augmented embeddings: document ids differ from the task data: 1 missing \(e.g. 'd3'\)"):
        _effect(bench, base, augmented, 0.5)
    ids_path.write_text(json.dumps({"queries": ["q1"], "corpus": ids["corpus"]}))
    with pytest.raises(DataError, match="rows but ids.json lists 1 queries ids"):
        _effect(bench, base, augmented, 0.5)
    ids_path.write_text(json.dumps({"queries": ["q1", "q1"], "corpus": ids["corpus"]}))
    with pytest.raises(DataError, match="appears twice"):
        _effect(bench, base, augmented, 0.5)


def test_stale_data_digest_is_refused(tmp_path):
    bench, base, augmented = _hand_setup(tmp_path, HAND_A)
    qrels_path = bench / "toy" / "qrels" / "test.tsv"
    qrels_path.write_text(qrels_path.read_text() + "q2\td1\t1\n")  # the data changed after both runs
    with pytest.raises(DataError, match=r"report\.json: tasks/toy/data_digest: task 'toy' \(test\) was graded on other data"):
        _effect(bench, base, augmented, 0.5)


def test_missing_inputs_are_refused(tmp_path):
    bench, base, augmented = _hand_setup(tmp_path, HAND_A)
    with pytest.raises(UsageError, match="--weight must be a number in"):
        _effect(bench, base, augmented, 1.5)
    with pytest.raises(UsageError, match="--weight must be a number in"):
        _effect(bench, base, augmented, float("nan"))
    with pytest.raises(UsageError, match="has no report.json"):
        _effect(bench, tmp_path, augmented, 0.5)
    with pytest.raises(UsageError, match="benchmark 'bench' has no task 'nope'"):
        _effect(bench, base, augmented, 0.5, tasks=["nope"])
    (augmented / "embeddings" / "toy" / "corpus.npy").unlink()
    with pytest.raises(UsageError, match="--augmented: .* kept no embeddings for task 'toy'"):
        _effect(bench, base, augmented, 0.5)
    shutil.rmtree(base / "embeddings")
    with pytest.raises(UsageError, match="--base: .* kept no embeddings for task 'toy'"):
        _effect(bench, base, augmented, 0.5)
    report = json.loads((base / "report.json").read_text())
    report["tasks"]["other"] = report["tasks"].pop("toy")  # a report of another benchmark's task
    (base / "report.json").write_text(json.dumps(report))
    with pytest.raises(UsageError, match="grades no task of benchmark"):
        _effect(bench, base, augmented, 0.5)
    with pytest.raises(UsageError, match="did not grade task 'toy'"):
        _effect(bench, base, augmented, 0.5, tasks=["toy"])


# --------------------------------------------------------------------------- CLI


def test_cli_json_table_and_errors(tmp_path):
    bench, base, augmented = _hand_setup(tmp_path, HAND_A)
    runner = CliRunner()
    out = tmp_path / "effect" / "result.json"
    args = ["effect", "--base", str(base), "--augmented", str(augmented), "--weight", "0.5", "--benchmark", str(bench)]
    result = runner.invoke(cli, [*args, "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text())
    assert printed["kind"] == "effect" and printed["weight"] == 0.5 and printed["split"] == "test" and printed["benchmark"] == "bench"
    assert [b["report"] for b in printed["bases"]] == [str(base / "report.json")]
    assert printed["average_effect_mrr"] == 0.25
    table = runner.invoke(cli, [*args, "--pca-dims", "1,2"])
    assert table.exit_code == 0, table.output
    # In percent: dims 1 (+0) and 2 (+25.00) average to +12.50.
    assert "Average_EffectMRR over 1 task(s) = +12.50 (mean of the task averages; 2 configuration(s))" in table.stdout
    assert "values in percent" in table.stdout and "+25.00" in table.stdout
    assert "toy" in table.stdout and "y/y" in table.stdout and "n/n" in table.stdout
    bad = runner.invoke(cli, [*args[:-4], "--weight", "2", "--benchmark", str(bench)])
    assert bad.exit_code == 2 and "error: --weight must be a number in [0, 1], got 2.0" in bad.stderr
    bad_dims = runner.invoke(cli, [*args, "--pca-dims", "0"])
    assert bad_dims.exit_code == 2 and "--pca-dims: '0' is not a positive integer" in bad_dims.stderr


def test_end_to_end_with_grader_run(tmp_path):
    """Kept embeddings from real ``grader run``s: MRR_org equals the run's own MRR@1000 (native and PCA)."""
    rng = np.random.default_rng(4)
    corpus = [{"_id": f"c{i}", "title": "", "text": words(*rng.choice(np.arange(3, 60), size=3))} for i in range(12)]
    queries = [{"_id": f"q{i}", "text": words(*rng.choice(np.arange(3, 60), size=2))} for i in range(6)]
    qrels = {"test": [(f"q{i}", f"c{(2 * i) % 12}", 1) for i in range(6)]}
    write_task(tmp_path / "bench" / "tiny", corpus=corpus, queries=queries, qrels=qrels)
    bench = tmp_path / "bench"
    runner = CliRunner()
    runs = {}
    for role, seed in (("base", 1), ("aug", 2)):
        submission = onnx_submission(tmp_path / f"sub-{role}", table=embedding_table(dim=8, seed=seed), manifest={"name": f"tiny-{role}"})
        out = tmp_path / f"run-{role}"
        result = runner.invoke(
            cli,
            [
                "run",
                str(submission),
                "--benchmark",
                str(bench),
                "--out",
                str(out),
                "--threads",
                "1",
                "--sandbox",
                "none",
                "--keep-embeddings",
                "--pca-dims",
                "3",
                "--quiet",
            ],
        )
        assert result.exit_code == 0, result.output
        runs[role] = out
    effect = runner.invoke(
        cli,
        [
            "effect",
            "--base",
            str(runs["base"]),
            "--augmented",
            str(runs["aug"]),
            "--weight",
            "0.25",
            "--benchmark",
            str(bench),
            "--pca-dims",
            "3,8",
            "--json",
        ],
    )
    assert effect.exit_code == 0, effect.output
    data = json.loads(effect.stdout)
    report = json.loads((runs["base"] / "report.json").read_text())["tasks"]["tiny"]
    by_dim = {c["dimension"]: c for c in data["configurations"]}
    assert by_dim[8]["pca_applied"] == {"base": False, "augmented": False}
    assert by_dim[8]["mrr_org"] == pytest.approx(report["measures"]["MRR@1000"], abs=1e-12)
    assert by_dim[3]["mrr_org"] == pytest.approx(report["pca"]["3"]["measures"]["MRR@1000"], abs=1e-12)
    assert data["bases"][0]["subject"]["name"] == "tiny-base" and data["augmented"]["subject"]["name"] == "tiny-aug"
    assert data["bases"][0]["labels"] == json.loads((runs["base"] / "report.json").read_text())["labels"]
