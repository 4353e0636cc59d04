"""Run file formats: each reads to the same Run; each malformation is one line naming file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.errors import RunFormatError
from grader.runs.readers import RunFormat, detect_format, read_run

RANKINGS = {"q1": {"d1": 0.5, "d2": 0.5, "d10": 0.25}, "q2": {"d9": 1.0}, "q3": {}}


def _write_all(tmp_path: Path) -> dict[str, Path]:
    trec = tmp_path / "run.trec"
    trec.write_text(
        "".join(f"{q} Q0 {d} {i + 1} {s!r} tag\n" for q, docs in RANKINGS.items() for i, (d, s) in enumerate(docs.items())), encoding="utf-8"
    )
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps(RANKINGS), encoding="utf-8")
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"query_id": q, "hits": [{"id": d, "score": s} for d, s in docs.items()]}) + "\n" for q, docs in RANKINGS.items()),
        encoding="utf-8",
    )
    return {"trec": trec, "json": as_json, "jsonl": jsonl}


def test_formats_read_to_the_same_trec_ordered_run(tmp_path: Path) -> None:
    paths = _write_all(tmp_path)
    runs = {name: read_run(path) for name, path in paths.items()}
    # ties broken by doc id descending, byte-wise: 'd2' > 'd1'
    assert runs["json"].ranking("q1") == [("d2", 0.5), ("d1", 0.5), ("d10", 0.25)]
    assert runs["jsonl"].to_mapping() == runs["json"].to_mapping()
    # a TREC file cannot express an empty ranking: q3 is simply absent
    assert runs["trec"].to_mapping() == {q: d for q, d in runs["json"].to_mapping().items() if d}


def test_detection_by_name_and_content(tmp_path: Path) -> None:
    paths = _write_all(tmp_path)
    assert detect_format(paths["trec"]) is RunFormat.TREC
    plain = tmp_path / "noext"
    plain.write_bytes(paths["jsonl"].read_bytes())
    assert detect_format(plain) is RunFormat.JSONL
    plain.write_text(json.dumps(RANKINGS, indent=1), encoding="utf-8")
    assert detect_format(plain) is RunFormat.JSON


def test_irregular_whitespace_trec_falls_back_to_line_reader(tmp_path: Path) -> None:
    path = tmp_path / "run.txt"
    path.write_text("q1\tQ0\td1\t1\t0.5\ttag\nq1  Q0 d2 2 0.25   tag\n", encoding="utf-8")
    assert read_run(path).ranking("q1") == [("d1", 0.5), ("d2", 0.25)]


def test_large_trec_file_uses_identical_order_as_mapping(tmp_path: Path) -> None:
    # many ties and out-of-order lines exercise the vectorised ordering of the fast reader
    lines = []
    expected: dict[str, dict[str, float]] = {}
    for q in range(40):
        for d in range(60):
            score = float((q * 7 + d * 13) % 5) / 4
            doc = f"{(d * 37) % 97}"
            expected.setdefault(f"q{q}", {})[doc] = score
            lines.append(f"q{q} Q0 {doc} 0 {score!r} x\n")
    lines.reverse()
    path = tmp_path / "big.trec"
    path.write_text("".join(lines), encoding="utf-8")
    run = read_run(path)
    for q, docs in expected.items():
        want = sorted(docs.items(), key=lambda item: (item[1], item[0].encode()), reverse=True)
        assert run.ranking(q) == want


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("r.trec", "q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", "r.trec:2: docid: document 'd1' appears twice for query 'q1'"),
        ("r.trec", "q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 inf t\n", "r.trec:2: score: score must be finite"),
        ("r.trec", "q1 Q0 d1 1 abc t\n", "r.trec:1: score: score is not a number: 'abc'"),
        ("r.trec", "q1 Q0 d1 1 0.5\n", "r.trec:1: expected 6 whitespace-separated fields"),
        (
            "r.jsonl",
            '{"query_id": "q1", "hits": [{"id": "d1", "score": 1}, {"id": "d1", "score": 2}]}\n',
            "r.jsonl:1: /hits/1/id: document 'd1' appears twice",
        ),
        ("r.jsonl", '{"query_id": "q1", "hits": []}\n{"query_id": "q1", "hits": []}\n', "r.jsonl:2: /query_id: query 'q1' appears on two lines"),
        ("r.jsonl", '{"query_id": "q1", "hits": [{"id": "d1", "score": NaN}]}\n', "r.jsonl:1: NaN is not a valid score"),
        ("r.jsonl", '{"query_id": 7, "hits": []}\n', "r.jsonl:1: /query_id: 7 is not of type 'string'"),
        ("r.jsonl", '{"query_id": "q", "hits": [{"doc": "d1", "score": 1}]}\n', "r.jsonl:1: /hits/0"),
        ("r.jsonl", '{"query_id": "q", "hits": [{"id": "d1", "score": "1"}]}\n', "r.jsonl:1: /hits/0/score: '1' is not of type 'number'"),
        ("r.jsonl", '{"query_id": "q", "hits": [{"id": "d1", "score": true}]}\n', "r.jsonl:1: /hits/0/score: True is not of type 'number'"),
        ("r.jsonl", '{"query_id": "q", "hits": [}\n', "r.jsonl:1: invalid JSON"),
        ("r.json", '{"q1": {"d1": "x"}}', "r.json: /q1/d1: score must be a number"),
        ("r.json", '{"q1": {"d1": 1, "d1": 2}}', "r.json: key 'd1' appears twice"),
        ("r.json", '{"q1": {"d1": Infinity}}', "r.json: Infinity is not a valid score"),
    ],
)
def test_malformed_runs_fail_with_one_clear_line(tmp_path: Path, name: str, content: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunFormatError) as caught:
        read_run(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path))
    assert expected in message


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(RunFormatError, match="run file not found"):
        read_run(tmp_path / "absent.trec")
    (tmp_path / "empty").write_text("\n\n", encoding="utf-8")
    with pytest.raises(RunFormatError, match="empty"):
        read_run(tmp_path / "empty")
