"""Comment lines in TREC runs, skipped as trec_eval 10 skips them.

trec_eval's ``get_trec_results.c`` (commit ``f4253652``) passes over the blanks that
start a line (C's ``isspace``: space, tab, vertical tab, form feed, carriage return)
and skips the line if what follows is ``#``. So ``#301 Q0 ...`` is a comment, never
query ``#301``, while a ``#`` later in a line is data. Each expectation below was
checked against trec_eval built from that commit. Both readers must apply the rule:
pyarrow's fast reader (pieces of the file at a time) and the line reader it falls
back to.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

import grader.runs.readers as readers
from grader.cli.main import cli
from grader.errors import RunFormatError
from grader.runs.readers import RunFormat, is_trec_run_comment, read_run

DATA = Path(__file__).parent / "data" / "trec_eval"

# Lines trec_eval skips, each with its own leading blanks.
COMMENTS = [
    "# run STANDARD, 2026",
    "#",
    "##",
    "  # indented",
    "\t# after a tab",
    "\v\f #\tafter a vertical tab and a form feed",
    "#301 Q0 FBIS3-10082 1 9999.0 STANDARD",  # would be query '#301', ranked first, if it were data
    " #302 Q0 FBIS4-67701 1 9999.0 STANDARD",
    "# ünïcödé text, and \u00a0 a no-break space",
]


def _with_comments(plain: str, seed: int, *, crlf: bool = False) -> str:
    """``plain``'s lines with comment lines inserted at random places, first and last among them."""
    rng = random.Random(seed)
    lines = plain.splitlines()
    for comment in COMMENTS:
        lines.insert(rng.randrange(len(lines) + 1), comment)
    lines = [COMMENTS[0], *lines, COMMENTS[6]]
    end = "\r\n" if crlf else "\n"
    # The last comment without a line end, as trec_eval allows.
    return end.join(lines)


@pytest.mark.parametrize("line", COMMENTS)
def test_the_rule_is_a_hash_after_any_blanks(line: str) -> None:
    assert is_trec_run_comment(line + "\n")
    assert not is_trec_run_comment("301 Q0 #d1 1 0.5 t\n")
    assert not is_trec_run_comment("x#301 Q0 d1 1 0.5 t\n")
    # A no-break space is not C's isspace(): trec_eval reads this line as data.
    assert not is_trec_run_comment("\u00a0#301 Q0 d1 1 0.5 t\n")


@pytest.mark.parametrize(("seed", "crlf"), [(0, False), (1, False), (2, True)])
def test_a_run_with_comment_lines_scores_as_without(tmp_path: Path, seed: int, crlf: bool) -> None:
    """trec_eval's results.test with comments gives out.test.aq's values, through both readers and `grader score`."""
    plain = DATA / "results.test"
    text = plain.read_text(encoding="utf-8")
    # trec_eval's file is tab-separated, which the fast reader leaves to the line reader: single-spaced, it takes it.
    spaced = "".join(" ".join(line.split()) + "\n" for line in text.splitlines())
    expected = read_run(plain).to_mapping()
    commented = tmp_path / "results.commented"
    commented.write_bytes(_with_comments(spaced, seed, crlf=crlf).encode())
    assert readers._read_trec_arrow(commented).to_mapping() == expected
    assert readers._read_trec_lines(commented).to_mapping() == expected
    commented.write_bytes(_with_comments(text, seed, crlf=crlf).encode())
    assert read_run(commented).to_mapping() == expected

    def score(run: Path) -> dict[str, object]:
        result = CliRunner().invoke(
            cli, ["score", "--qrels", str(DATA / "qrels.test"), "--run", str(run), "--measure", "MAP@1000,NDCG@10,P@5,MRR@1000", "--format", "json"]
        )
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert isinstance(data, dict)
        return data

    scored = score(commented)
    assert scored == score(plain)
    # out.test.aq: "map all 0.1785" (trec_eval -m all_trec -q qrels.test results.test).
    measures = scored["measures"]
    assert isinstance(measures, dict)
    assert f"{measures['MAP@1000']:.4f}" == "0.1785"


def test_a_hash_leading_query_id_is_a_comment_not_a_query(tmp_path: Path) -> None:
    """The judged query '#q1' (a qrels line's '#' after a blank is data) gets no results from a run's '#q1' line.

    trec_eval -c -m map: '#q1' 0.0000, q1 1.0000, all 0.5000. Read as data, '#q1' would score 1.
    """
    qrels = tmp_path / "qrels"
    qrels.write_text("q1 0 d1 1\n #q1 0 d9 1\n", encoding="utf-8")
    for name, text in {"column0": "#q1 Q0 d9 1 9.0 t\n", "indented": "  #q1 Q0 d9 1 9.0 t\n"}.items():
        run = tmp_path / f"{name}.trec"
        run.write_text(text + "q1 Q0 d1 1 0.5 t\n", encoding="utf-8")
        assert read_run(run).to_mapping() == readers._read_trec_lines(run).to_mapping() == {"q1": {"d1": 0.5}}
        result = CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(run), "--measure", "MAP@1000,P@1", "--format", "json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["n_queries"] == 2
        assert data["measures"] == {"MAP@1000": 0.5, "P@1": 0.5}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # '#' in a field after the first is data, and text after the tag is ignored even if it starts with '#'.
        ("q1 Q0 #d1 1 0.5 t\n", {"q1": {"#d1": 0.5}}),
        ("q1 Q0 d#1 1 0.5 #t\n", {"q1": {"d#1": 0.5}}),
        ("q1 Q0 d1 1 0.5 t # a note\n", {"q1": {"d1": 0.5}}),
        # A line whose first field merely contains '#' is data.
        ("q#1 Q0 d1 1 0.5 t\n", {"q#1": {"d1": 0.5}}),
        # A comment after a CRLF line and a comment line with CRLF.
        ("q1 Q0 d1 1 0.5 t\r\n# c\r\nq1 Q0 d2 2 0.4 t\r\n", {"q1": {"d1": 0.5, "d2": 0.4}}),
    ],
)
def test_a_hash_elsewhere_is_data(tmp_path: Path, content: str, expected: dict[str, dict[str, float]]) -> None:
    path = tmp_path / "r.trec"
    path.write_bytes(content.encode())
    assert read_run(path).to_mapping() == readers._read_trec_lines(path).to_mapping() == expected


def test_the_fast_reader_takes_runs_with_hash_in_ids_and_with_comments(tmp_path: Path) -> None:
    """Neither a '#' inside ids nor comment lines send a single-space run to the line reader."""
    ids = tmp_path / "ids.trec"
    ids.write_text("q1 Q0 CR#93E-1860 1 0.5 t\nq1 Q0 d#2 2 0.4 t#\n", encoding="utf-8")
    assert readers._read_trec_arrow(ids).to_mapping() == {"q1": {"CR#93E-1860": 0.5, "d#2": 0.4}}
    commented = tmp_path / "commented.trec"
    commented.write_text("# header\nq1 Q0 d#1 1 0.5 t\n\t# note\nq2 Q0 d2 1 0.4 t\n#end", encoding="utf-8")
    assert readers._read_trec_arrow(commented).to_mapping() == {"q1": {"d#1": 0.5}, "q2": {"d2": 0.4}}


@pytest.mark.parametrize("seed", range(8))
def test_comments_across_the_fast_readers_pieces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int) -> None:
    """With pieces of 1 KiB, comments fall at and across piece boundaries; both readers equal the plain run."""
    monkeypatch.setattr(readers, "_PIECE_BYTES", 1 << 10)
    monkeypatch.setattr(readers, "_BLOCK_BYTES", 1 << 9)
    rng = random.Random(seed)
    entries = [(f"q{rng.randrange(30)}", f"d{i}" if rng.random() < 0.8 else f"d#{i}", rng.randrange(100) / 8) for i in range(600)]
    lines = [f"{q} Q0 {d} 0 {s!r} tag" for q, d, s in entries]
    plain = tmp_path / "plain.trec"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for _ in range(150):
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(COMMENTS[:6]) + " x" * rng.randrange(40))
    commented = tmp_path / "commented.trec"
    commented.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = readers._read_trec_arrow(plain).to_mapping()
    assert readers._read_trec_arrow(commented).to_mapping() == expected
    assert readers._read_trec_lines(commented).to_mapping() == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # Comment lines count in the line numbers of errors.
        ("# header\n\n  # note\nq1 Q0 d1 1 x t\n", "r.trec:4: score: score is not a number: 'x'"),
        ("# only\n  # comments\n", "r.trec: run file has no entries"),
        # A no-break space is not a blank to trec_eval: this line is data, with too few fields.
        ("\u00a0# a note\n", "r.trec:1: expected 6 whitespace-separated fields"),
    ],
)
def test_comments_do_not_hide_errors(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "r.trec"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunFormatError) as caught:
        read_run(path)
    assert str(caught.value).startswith(str(tmp_path / expected))


def test_a_run_of_blank_lines_only_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "r.trec"
    path.write_text("\n\n\n", encoding="utf-8")
    with pytest.raises(RunFormatError, match="run file has no entries"):
        read_run(path, RunFormat.TREC)


def test_vertical_tab_and_form_feed_split_fields_as_in_trec_eval(tmp_path: Path) -> None:
    """C's isspace() has them, so trec_eval reads d, not d<VT>2, with the rank as its score (checked: num_rel_ret 2)."""
    path = tmp_path / "r.trec"
    path.write_text("\vq1 Q0 d1 1 0.5 t\nq1 Q0 d\v2 1 7 t\n\fq2 Q0 d\f3 1 0.5 t\n", encoding="utf-8")
    expected = {"q1": {"d1": 0.5, "d": 1.0}, "q2": {"d": 1.0}}
    assert read_run(path).to_mapping() == readers._read_trec_lines(path).to_mapping() == expected
    with pytest.raises(readers._NeedsLineByLine):
        readers._read_trec_arrow(path)  # pyarrow splits at spaces only: it must not take these ids
