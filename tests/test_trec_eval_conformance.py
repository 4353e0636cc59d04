"""Conformance with trec_eval's own test suite: every value the grader can express, as trec_eval prints it.

The inputs and the published outputs are trec_eval's (``tests/data/trec_eval``, see its
README): its Makefile's ``quicktest`` diffs a fresh build against these outputs. Each
output line is ``measure<blanks>qid<TAB>value``: one line per query and measure with
``-q``, then the ``all`` lines (the mean over ``num_q`` queries), values printed ``%.4f``.
The grader's value, formatted the same way, must equal the printed text, for every
query and for ``all``.

Which queries trec_eval averages over (``num_q``), against the grader's policies:

* without ``-c``, the queries with both judgements and results: in ``out.test.aq`` and
  ``out.test.aql`` every judged query (301, 302, 303) has results, so that set is every
  judged query, which is what ``strict`` averages;
* with ``-c`` (``out.test.aqc``), every query of the judgements, a query without
  results scoring 0 (302 is absent from ``results.trunc``): exactly ``strict``.

So ``strict`` reproduces all of them; the test checks ``num_q`` and the printed query
ids against the evaluation's. (``coir`` is not trec_eval's: it rounds scores to float32.)

Measures: ``P_k``, ``recall_k``, ``ndcg_cut_k``, ``map_cut_k`` and ``success_k`` are the
grader's ``P@k``, ``Recall@k``, ``NDCG@k``, ``MAP@k`` and ``Success@k``; trec_eval's uncut
``map``, ``ndcg``, ``recip_rank``, ``Rprec`` and ``bpref`` are the grader's measures at
1000 (``MAP@1000``, ``NDCG@1000``, ``MRR@1000``, ``Rprec@1000``, ``bpref@1000``), equal
because no query retrieves more than 1000 documents here (checked). ``-l2`` (``out.test.aql``)
is the engine's ``relevance_level=2``: a judgement >= 2 is relevant for every measure but
nDCG, whose gains are the judgements (trec_eval's ``ndcg`` and ``ndcg_cut`` ignore ``-l``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.data.qrels import read_qrels
from grader.metrics.measures import Family, Measure
from grader.metrics.policy import Evaluation, Policy, evaluate
from grader.runs.readers import read_run

DATA = Path(__file__).parent / "data" / "trec_eval"
UNCUT_AT = 1000
_UNCUT = {"map": Family.MAP, "ndcg": Family.NDCG, "recip_rank": Family.MRR, "Rprec": Family.RPREC, "bpref": Family.BPREF}
_CUT = re.compile(r"^(?P<name>P|recall|ndcg_cut|map_cut|success)_(?P<k>[0-9]+)$")
_CUT_FAMILY = {"P": Family.P, "recall": Family.RECALL, "ndcg_cut": Family.NDCG, "map_cut": Family.MAP, "success": Family.SUCCESS}


@dataclass(frozen=True)
class Printed:
    """trec_eval's output: for each expressible (trec_eval measure, qid or 'all'), the grader's measure and the value text."""

    values: dict[tuple[str, str], tuple[Measure, str]]
    num_q: int | None  # printed unless -m names the measures
    query_ids: frozenset[str]


def _grader_measure(name: str) -> Measure | None:
    """The grader's measure for a trec_eval measure name, or None if it has none."""
    if name in _UNCUT:
        return Measure(_UNCUT[name], UNCUT_AT)
    match = _CUT.match(name)
    return Measure(_CUT_FAMILY[match["name"]], int(match["k"])) if match else None


def _lines(path: Path) -> Iterator[tuple[str, str, str]]:
    for line in path.read_text(encoding="ascii").splitlines():
        name, qid, value = line.split()
        yield name, qid, value


def read_printed(path: Path) -> Printed:
    """Parse a ``trec_eval -q`` output file into its expressible values."""
    values: dict[tuple[str, str], tuple[Measure, str]] = {}
    num_q = None
    query_ids: set[str] = set()
    for name, qid, value in _lines(path):
        if name == "num_q":
            num_q = int(value)
            continue
        if qid != "all":
            query_ids.add(qid)
        measure = _grader_measure(name)
        if measure is not None:
            assert (name, qid) not in values, (name, qid)
            values[(name, qid)] = (measure, value)
    return Printed(values, num_q, frozenset(query_ids))


def grade(qrels_name: str, run_name: str, measures: set[Measure], relevance_level: int = 1) -> Evaluation:
    run = read_run(DATA / run_name)
    # trec_eval's uncut measures are the grader's at 1000 only if no ranking is longer.
    assert max(len(run.ranking(q)) for q in run.query_ids) <= UNCUT_AT
    return evaluate(read_qrels(DATA / qrels_name), run, sorted(measures), Policy.STRICT, relevance_level=relevance_level)


def assert_as_printed(evaluation: Evaluation, printed: Printed) -> None:
    """Every printed value equals the grader's at trec_eval's ``%.4f``; the averaged queries are trec_eval's."""
    assert evaluation.counts.evaluated == (len(printed.query_ids) if printed.num_q is None else printed.num_q)
    assert set(evaluation.per_query.query_ids) == printed.query_ids
    per_query = evaluation.per_query.as_dict()
    means = evaluation.means()
    wrong = {}
    for (name, qid), (measure, text) in printed.values.items():
        got = means[str(measure)] if qid == "all" else per_query[qid][str(measure)]
        if f"{got:.4f}" != text:
            wrong[(name, str(measure), qid)] = (got, text)
    assert not wrong, f"(grader, trec_eval) differ: {wrong}"


# out-file -> (qrels, run, relevance level, expressible measures in it, queries printed)
CASES = {
    "aq": ("out.test.aq", "qrels.test", "results.test", 1),
    "aq-with-comments": ("out.test.aq", "qrels.test.with-comments", "results.test", 1),
    "aqc": ("out.test.aqc", "qrels.test", "results.trunc", 1),
    "aql": ("out.test.aql", "qrels.rel_level", "results.test", 2),
    "meas_params": ("out.test.meas_params", "qrels.test", "results.test", 1),
}
# trec_eval's all_trec has P, recall, ndcg_cut and map_cut at 9 cut-offs, success at 3, and the 5 uncut measures.
ALL_TREC_EXPRESSIBLE = 4 * 9 + 3 + 5
# meas_params: P.5,7,3; recall.20,2000; ndcg_cut.10,20,23.4 (trec_eval reads the cut-off 23); success.2,5,20.
MEAS_PARAMS_EXPRESSIBLE = 3 + 2 + 3 + 3


@pytest.mark.parametrize("case", list(CASES))
def test_every_expressible_value_is_trec_evals(case: str) -> None:
    out_name, qrels_name, run_name, level = CASES[case]
    printed = read_printed(DATA / out_name)
    names = {name for name, _ in printed.values}
    assert len(names) == (MEAS_PARAMS_EXPRESSIBLE if case == "meas_params" else ALL_TREC_EXPRESSIBLE)
    # Each measure once per query and once for "all".
    assert len(printed.values) == len(names) * (len(printed.query_ids) + 1)
    measures = {measure for measure, _ in printed.values.values()}
    assert_as_printed(grade(qrels_name, run_name, measures, level), printed)


def test_the_cases_have_teeth() -> None:
    """The published values vary (no all-zero column passes trivially), and -l2 and -c change them."""
    aq = read_printed(DATA / "out.test.aq")
    aql = read_printed(DATA / "out.test.aql")
    aqc = read_printed(DATA / "out.test.aqc")
    for family in Family:
        column = {text for measure, text in aq.values.values() if measure.family is family}
        assert len(column) >= 3, family
    assert aq.values[("bpref", "301")] != aql.values[("bpref", "301")]
    assert aq.values[("map", "all")] != aql.values[("map", "all")]
    assert aqc.values[("map", "302")][1] == "0.0000" != aq.values[("map", "302")][1]
    # Graded with the default level 1, the -l2 file's binary measures would not be trec_eval's.
    binary = {key: entry for key, entry in aql.values.items() if key[0] in ("bpref", "map")}
    evaluation = grade("qrels.rel_level", "results.test", {measure for measure, _ in binary.values()})
    with pytest.raises(AssertionError, match="differ"):
        assert_as_printed(evaluation, Printed(binary, aql.num_q, aql.query_ids))


def test_the_coir_policy_is_not_trec_evals_c() -> None:
    """Without -c trec_eval skips a judged query the run lacks; with -c it scores it 0, as strict does, not coir."""
    evaluation = evaluate(read_qrels(DATA / "qrels.test"), read_run(DATA / "results.trunc"), [Measure(Family.MAP, UNCUT_AT)], Policy.COIR)
    assert evaluation.counts.evaluated == 2 != read_printed(DATA / "out.test.aqc").num_q


# --------------------------------------------------------------------------- through `grader score`


@pytest.mark.parametrize(
    ("out_name", "qrels_name", "run_name", "extra"),
    [
        ("out.test.aqc", "qrels.test.with-comments", "results.trunc", []),
        ("out.test.aql", "qrels.rel_level", "results.test", ["--relevance-level", "2"]),
    ],
)
def test_grader_score_prints_trec_evals_means(out_name: str, qrels_name: str, run_name: str, extra: list[str]) -> None:
    """The two files trec_eval scores that the grader once refused, and -l2, through the command itself."""
    printed = read_printed(DATA / out_name)
    wanted = {name: entry for (name, qid), entry in printed.values.items() if qid == "all"}
    measures = ",".join(sorted({str(measure) for measure, _ in wanted.values()}))
    result = CliRunner().invoke(
        cli, ["score", "--qrels", str(DATA / qrels_name), "--run", str(DATA / run_name), "--measure", measures, "--format", "json", *extra]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["n_queries"] == printed.num_q and data["policy"] == "strict"
    assert data.get("relevance_level", 1) == (int(extra[1]) if extra else 1)
    assert {name: f"{data['measures'][str(measure)]:.4f}" for name, (measure, _) in wanted.items()} == {
        name: text for name, (_, text) in wanted.items()
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--relevance-level", "0"], "Invalid value for '--relevance-level'"),
        (["--relevance-level", "2", "--policy", "coir"], "--relevance-level 2 needs --policy strict and no --out"),
        (["--relevance-level", "2", "--out", "report.json"], "--relevance-level 2 needs --policy strict and no --out"),
    ],
)
def test_relevance_levels_the_command_refuses(args: list[str], message: str, tmp_path: Path) -> None:
    command = ["score", "--qrels", str(DATA / "qrels.rel_level"), "--run", str(DATA / "results.test"), *args]
    result = CliRunner().invoke(cli, [str(tmp_path / arg) if arg == "report.json" else arg for arg in command])
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "report.json").exists()
