"""TREC inputs as trec_eval reads them: what it accepts is accepted, nothing looser.

trec_eval 10 (usnistgov/trec_eval, ``get_qrels.c`` and ``get_trec_results.c``):
a qrels line whose first character is ``#`` is a comment, and so is a run line whose first
character after any blanks is ``#``; a run's fields after the run tag are ignored. Everything else malformed stays one error line naming file and line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.data.qrels import read_qrels
from grader.errors import DataError, RunFormatError
from grader.runs.readers import RunFormat, read_run

DATA = Path(__file__).parent / "data" / "trec_eval"


def test_trec_evals_commented_qrels_read_as_the_plain_ones() -> None:
    plain = read_qrels(DATA / "qrels.test").as_dict()
    commented = read_qrels(DATA / "qrels.test.with-comments").as_dict()
    # trec_eval's file has three comment lines, and one doc id with a '#' inside, which is data:
    # qrels.test's non-relevant CR93E-1860 is CR#93E-1860 there (neither is retrieved by results.test).
    text = (DATA / "qrels.test.with-comments").read_text(encoding="utf-8")
    assert sum(line.startswith("#") for line in text.splitlines()) == 3
    assert commented["301"].pop("CR#93E-1860") == plain["301"].pop("CR93E-1860") == 0
    assert commented == plain


def test_a_comment_is_a_line_starting_with_hash(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_text("#q0 0 d0 1\n# a comment with   many words\n#\nq1 0 d#1 1\nq1 0 d2 0 \n", encoding="utf-8")
    assert read_qrels(path).as_dict() == {"q1": {"d#1": 1, "d2": 0}}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # A '#' after leading blanks is not a comment (trec_eval parses it as a line too).
        ("q1 0 d1 1\n  # indented text\n", "q.txt:2: expected 4 whitespace-separated fields (query iter doc rel), got 3"),
        ("q1 0 d1 1\nq1 0 d2\n", "q.txt:2: expected 4 whitespace-separated fields (query iter doc rel), got 3"),
        # Unlike a run, a qrels line takes nothing after the relevance (trec_eval: "Malformed line").
        ("q1 0 d1 1 extra\n", "q.txt:1: expected 4 whitespace-separated fields (query iter doc rel), got 5"),
        ("q1 0 d1 high\n", "q.txt:1: relevance: relevance must be an integer, got 'high'"),
        ("q1 0 d1 1.5\n", "q.txt:1: relevance: relevance must be an integer, got '1.5'"),
        ("q1 0 d1 1\n# comment\nq1 0 d1 0\n", "q.txt:3: doc-id: document 'd1' is judged twice for query 'q1'"),
    ],
)
def test_other_malformed_qrels_lines_stay_refused(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "q.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as caught:
        read_qrels(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message == f"{tmp_path / expected}"


def test_trec_evals_run_with_text_after_the_tag_is_read() -> None:
    run = read_run(DATA / "results.trunc")
    text = (DATA / "results.trunc").read_text(encoding="utf-8")
    assert {len(line.split()) for line in text.splitlines()} == {6, 7, 8, 9}
    assert run.query_ids == ("301", "303")
    assert len(run.ranking("301")) == 500 and len(run.ranking("303")) == 84


@pytest.mark.parametrize("separator", [" ", "\t"])
def test_fields_after_the_tag_are_ignored(tmp_path: Path, separator: str) -> None:
    """The same run with and without trailing fields reads identically (fast and line readers alike)."""
    lines = [("q1", "d1", "0.5"), ("q1", "d2", "0.5"), ("q2", "d3", "2.0"), ("q1", "d3", "-1.0")]
    plain = tmp_path / "plain.trec"
    plain.write_text("".join(separator.join([q, "Q0", d, "0", s, "tag"]) + "\n" for q, d, s in lines), encoding="utf-8")
    extra = tmp_path / "extra.trec"
    extra.write_text(
        "".join(separator.join([q, "Q0", d, "0", s, "tag", *["junk", "1e999", "nan"][: i % 4]]) + "\n" for i, (q, d, s) in enumerate(lines)),
        encoding="utf-8",
    )
    expected = {"q1": {"d1": 0.5, "d2": 0.5, "d3": -1.0}, "q2": {"d3": 2.0}}
    assert read_run(plain).to_mapping() == read_run(extra).to_mapping() == expected
    assert read_run(extra, RunFormat.TREC).ranking("q1") == [("d2", 0.5), ("d1", 0.5), ("d3", -1.0)]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", "r.trec:2: expected 6 whitespace-separated fields"),
        ("q1 Q0 d1 1 0.5 t extra\nq1 Q0 d2 2\n", "r.trec:2: expected 6 whitespace-separated fields"),
        ("q1 Q0 d1 1 x t more fields\n", "r.trec:1: score: score is not a number: 'x'"),
        ("q1 Q0 d1 1 nan t more\n", "r.trec:1: score: score must be finite"),
        ("q1 Q0 d1 1 0.5 t a\nq1 Q0 d1 2 0.4 t b\n", "r.trec:2: docid: document 'd1' appears twice for query 'q1'"),
        # A comment line is skipped (tests/test_trec_run_comments.py) but still counts in line numbers.
        ("# a run comment\nq1 Q0 d1 1 0.5\n", "r.trec:2: expected 6 whitespace-separated fields"),
    ],
)
def test_other_malformed_run_lines_stay_refused(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "r.trec"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunFormatError) as caught:
        read_run(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / expected))
