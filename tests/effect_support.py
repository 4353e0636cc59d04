"""Helpers of the ``grader effect`` tests (tests/test_effect.py, tests/test_effect_bases.py): tiny benchmarks,
kept-embedding run folders written by hand, hand cases, and independent references (numpy, pytrec_eval)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytrec_eval

from grader.data.registry import resolve_benchmark
from grader.grading.runner import save_embeddings
from tests.conftest import write_task


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
