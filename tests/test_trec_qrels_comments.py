"""Where the grader's TREC qrels comments differ from trec_eval 10's, on purpose (docs/inputs.md).

``get_qrels.c`` (commit ``f4253652``) skips one comment line at a time: of two in a row it
reads the second as a judgement, and a comment as the last line makes it read past its
buffer (a segmentation fault, with trec_eval built from that commit). The grader skips
every line whose first character is ``#``, and blank lines, which trec_eval calls malformed.
"""

from __future__ import annotations

from pathlib import Path

from grader.data.qrels import read_qrels


def test_every_comment_line_is_skipped_not_only_the_first_of_a_row(tmp_path: Path) -> None:
    """trec_eval -c would judge document 'by' for a query '#' here, and average that query in as 0."""
    path = tmp_path / "q.txt"
    path.write_text("# qrels for the test\n# judged by NIST\n#\nq1 0 d1 1\n# one\n# two\n# last, without a line end", encoding="utf-8")
    assert read_qrels(path).as_dict() == {"q1": {"d1": 1}}


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_text("\nq1 0 d1 1\n   \n\t\nq1 0 d2 0\n\n", encoding="utf-8")
    assert read_qrels(path).as_dict() == {"q1": {"d1": 1, "d2": 0}}
