"""The MTEB exporter reads measure names with the metrics package's syntax, not a copy of it."""

from __future__ import annotations

import inspect

import grader.export.mteb as mteb
from grader.metrics.measures import Family, Measure, default_measures, printed_measure


def test_printed_measure_reads_exactly_the_printed_form() -> None:
    for measure in default_measures():
        assert printed_measure(str(measure)) == measure
    for text in ("ndcg@10", "NDCG@0", "NDCG@010", "ndcg_cut_10", "NDCG@10 ", "nDCG", "accuracy"):
        assert printed_measure(text) is None, text


def test_the_exporter_maps_every_family_and_keeps_no_pattern_of_its_own() -> None:
    # MTEB has no R-precision and no bpref (trec_eval's Rprec and bpref): those two are the families it lacks.
    assert set(mteb.FAMILIES) == set(Family) - {Family.RPREC, Family.BPREF}
    assert "re.compile" not in inspect.getsource(mteb)
    scores = mteb.mteb_scores({"NDCG@10": 0.5, "MRR@1000": 0.25, "Recall@7": 1.0, "P@1": 0.125, "bpref@10": 0.75, "whatever": 3.0})
    assert scores == {
        "hit_rate_at_1": 0.125,
        "main_score": 0.5,
        "mrr_at_1000": 0.25,
        "ndcg_at_10": 0.5,
        "precision_at_1": 0.125,
    }
    assert Measure(Family.P, 1) == printed_measure("P@1")
