"""TREC lines split where trec_eval splits them: at C's isspace(), not at every Unicode space.

A no-break space or an ASCII separator (``\\x1c``) inside an id is part of it for trec_eval
(checked against trec_eval built from ``f4253652``: both documents below are retrieved and
relevant). ``str.split()`` would cut the id in two and, since fields after a run's tag are
ignored, silently take the rank for the score.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import grader.runs.readers as readers
from grader.data.qrels import read_qrels
from grader.data.trec_fields import trec_fields
from grader.runs.readers import read_run


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        ("q1 Q0 d1 1 0.5 t\n", ["q1", "Q0", "d1", "1", "0.5", "t"]),
        (" \t\v\fq1\r\n", ["q1"]),
        ("q1 Q0 d\xa01 1 0.5 t\n", ["q1", "Q0", "d\xa01", "1", "0.5", "t"]),
        ("q1\u2003Q0 e\x1c2\x1f 1\n", ["q1\u2003Q0", "e\x1c2\x1f", "1"]),
        ("\xa0# x\n", ["\xa0#", "x"]),
        ("  \n", []),
    ],
)
def test_fields_are_cut_at_c_whitespace_only(line: str, fields: list[str]) -> None:
    assert trec_fields(line) == fields


def test_ids_with_other_spaces_are_read_whole_by_both_readers(tmp_path: Path) -> None:
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d\xa01 1 0.5 t\nq1 Q0 e\x1c2 2 0.25 t\n", encoding="utf-8")
    expected = {"q1": {"d\xa01": 0.5, "e\x1c2": 0.25}}
    assert readers._read_trec_arrow(run).to_mapping() == readers._read_trec_lines(run).to_mapping() == expected
    # A tab-separated copy, with a field after the tag, is the line reader's.
    tabbed = tmp_path / "t.trec"
    tabbed.write_text("q1\tQ0\td\xa01\t1\t0.5\tt\tx\nq1\tQ0\te\x1c2\t2\t0.25\tt\n", encoding="utf-8")
    assert read_run(tabbed).to_mapping() == expected
    qrels = tmp_path / "q.txt"
    qrels.write_text("q1 0 d\xa01 1\nq1 0 e\x1c2 1\n", encoding="utf-8")
    assert read_qrels(qrels).as_dict() == {"q1": {"d\xa01": 1, "e\x1c2": 1}}
