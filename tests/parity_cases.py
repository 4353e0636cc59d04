"""The adversarial cases of the metric parity tests (tests/test_metrics_parity.py, tests/test_metrics_parity_extras.py).

Seeded random judgements and runs: numeric-looking and unicode ids, ties, float32-exact and float64 scores,
graded and negative judgements, missing and extra queries, empty rankings.
"""

from __future__ import annotations

import random

import numpy as np

#: The largest difference allowed between the grader and the references.
TOLERANCE = 1e-12
N_PARITY_CASES = 400

NUMERIC_IDS = ["9", "10", "010", "1", "01", "001", "100", "0", "99", "1000", "9a", "10a", "1e3", "-1", "+1"]
ASCII_IDS = ["a", "A", "b", "B", "z", "Z", "doc", "doc1", "doc10", "doc9", "_x", "~", "a b"]
UNICODE_IDS = ["é", "e", "É", "ß", "ss", "日本", "日", "本", "😀", "a😀", "😀a", "～", "ａ", "Ω", "e\u0301", "\u00a0", "ÿ"]
QUERY_POOL = ["q1", "q2", "q3", "1", "10", "9", "010", "é", "日本", "😀", "Q", "a", "doc1", "ß", "z"]
SMALL_POOL = list(dict.fromkeys(NUMERIC_IDS + ASCII_IDS + UNICODE_IDS + QUERY_POOL))
LONG_POOL = list(dict.fromkeys(SMALL_POOL + [f"d{i}" for i in range(300)] + [str(i) for i in range(300)] + [f"{i:03d}" for i in range(120)]))

TIE_SCORES = [0.0, -0.0, 0.5, 1.0, 1.0, 2.0, -1.0]
EXTREME_F32 = [float(np.finfo(np.float32).max), float(np.float32(1e-45)), -float(np.float32(1e-45)), 16777216.0, 0.1]


def _score(rng: random.Random, mode: str) -> float:
    if mode == "ties":
        return rng.choice(TIE_SCORES)
    if mode == "binary":
        return rng.choice([0.0, 1.0])
    if mode == "f32":
        if rng.random() < 0.05:
            return float(np.float32(rng.choice(EXTREME_F32)))
        return float(np.float32(rng.uniform(-5.0, 5.0)))
    if mode == "mixed":
        return rng.choice(TIE_SCORES) if rng.random() < 0.5 else float(np.float32(rng.uniform(-2.0, 2.0)))
    if mode == "f64":  # not float32-exact; often equal once rounded to float32
        r = rng.random()
        if r < 0.5:
            return rng.choice([0.25, 0.5, 1.0, 3.0, 0.1]) + rng.choice([-1, 1]) * rng.uniform(0.0, 1e-9)
        if r < 0.8:
            return rng.random()
        return rng.choice([0.5, 1.0]) + rng.choice([0, 1e-12, 2e-12])
    raise AssertionError(mode)


def generate_case(seed: int, score_mode: str | None = None):
    """``(qrels, run_map, expected)``: a random adversarial case and its query accounting."""
    rng = random.Random(seed)
    if score_mode is None:
        score_mode = rng.choice(["ties", "binary", "f32", "mixed"])
    long_case = rng.random() < 0.15
    pool = LONG_POOL if long_case else SMALL_POOL
    n_judged = rng.randint(1, 8)
    query_ids = rng.sample(QUERY_POOL, n_judged)
    others = [q for q in QUERY_POOL if q not in query_ids] + ["x1", "x2"]
    extra_ids = rng.sample(others, rng.choice([0, 0, 1, 2]))

    qrels: dict[str, dict[str, int]] = {}
    run_map: dict[str, dict[str, float]] = {}
    missing, empty, ranked = set(), set(), set()
    for qid in query_ids:
        kind = rng.random()
        n_docs = rng.randint(1, 40 if long_case else 12)
        judged_docs = rng.sample(pool, n_docs)
        if rng.random() < 0.3 and qid not in judged_docs:
            judged_docs.append(qid)  # its own id judged (relevant or not): matters for coir
        if kind < 0.12:
            rels = [0] * len(judged_docs)
        elif kind < 0.2:
            rels = [rng.choice([0, -1, -2]) for _ in judged_docs]
        else:
            rels = [rng.choice([-2, -1, 0, 0, 1, 1, 1, 2, 3]) for _ in judged_docs]
        if max(rels) < 0:
            # pytrec-eval-terrier 0.5.11 reads out of bounds (segfaults) on a query whose
            # judgements are all negative (<= -2 crashes reliably): keep one 0 judgement.
            # Such queries are checked against the reference instead (test_all_negative_...).
            rels[rng.randrange(len(rels))] = 0
        qrels[qid] = dict(zip(judged_docs, rels))

        presence = rng.random()
        if presence < 0.12:
            missing.add(qid)
            continue
        if presence < 0.22:
            run_map[qid] = {}
            empty.add(qid)
            continue
        length = rng.randint(100, 400) if long_case and rng.random() < 0.6 else rng.choice([1, 2, 3, 4, 5, 6, 9, 10, 11, 15, 30])
        chosen = [d for d in judged_docs if rng.random() < 0.6]
        if rng.random() < 0.35 and qid not in chosen:
            chosen.append(qid)  # the query's own id, retrieved
        taken = set(chosen)
        rest = [d for d in pool if d not in taken]
        chosen += rng.sample(rest, max(0, min(len(rest), length - len(chosen))))
        rng.shuffle(chosen)
        run_map[qid] = {doc: _score(rng, score_mode) for doc in chosen}
        ranked.add(qid)
    for qid in extra_ids:
        docs = rng.sample(pool, rng.randint(0, 6))
        run_map[qid] = {doc: _score(rng, score_mode) for doc in docs}
    # Shuffle the run's query order so it differs from the qrels' order.
    items = list(run_map.items())
    rng.shuffle(items)
    run_map = dict(items)
    expected = {"judged": set(query_ids), "missing": missing, "empty": empty, "ranked": ranked, "extra": set(extra_ids)}
    return qrels, run_map, expected
