"""``grader score`` on a TREC run by blocks of queries (grader/metrics/streamed.py): the same numbers, the same refusals.

The block path must give the in-memory path's values bit for bit (every measure,
every query, both policies) and pytrec_eval's to 1e-12, on files written every
way TREC allows: runs of spaces and tabs, vertical tabs and form feeds, CRLF and
lone CR line ends, leading blanks, comments, fields after the tag, lines of a
query in any order, blocks far smaller than a query. What it cannot take (a line
to refuse, a query's lines apart) goes to today's readers, so each refusal is
theirs: one line naming file, line and field.
"""

from __future__ import annotations

import copy
import gzip
import random
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

import grader.runs.trec_scan as trec_scan
from grader.errors import RunFormatError
from grader.metrics.measures import parse_measures
from grader.metrics.policy import Evaluation, Policy, evaluate
from grader.metrics.streamed import evaluate_trec_file
from grader.runs import readers
from grader.runs.readers import read_run
from tests.cli_support import invoke
from tests.parity_cases import TOLERANCE, generate_case

MEASURES = parse_measures(
    [f"{family}@{k}" for family in ("NDCG", "MAP", "Recall", "P", "MRR", "Success", "Rprec", "bpref") for k in (1, 3, 5, 10, 100, 1000)]
)
_C_SPACE = set(" \t\n\v\f\r")
_SEPARATORS = [" ", "  ", "\t", " \t ", "\v", "\f", "   "]
_LINE_ENDS = ["\n", "\n", "\r\n", "\r"]


def _trec_text(run_map: dict[str, dict[str, float]], rng: random.Random, *, together: bool = True) -> str:
    """The run as TREC lines, written irregularly; each query's lines together (shuffled within) unless ``together`` is false."""
    lines: list[tuple[str, str]] = []
    for query_id, docs in run_map.items():
        items = list(docs.items())
        rng.shuffle(items)
        for rank, (doc_id, score) in enumerate(items, start=1):
            separator = rng.choice(_SEPARATORS)
            fields = [query_id, "Q0", doc_id, str(rank), repr(score), "tag", *rng.choice([[], ["extra"], ["more", "1e999", "nan"]])]
            lines.append((query_id, rng.choice(["", " ", "\t"]) + separator.join(fields) + rng.choice(["", " ", "\t"])))
    if not together:
        rng.shuffle(lines)
    out: list[str] = []
    for _, line in lines:
        roll = rng.random()
        if roll < 0.05:
            out.append(rng.choice(["# a comment", "  # indented comment with  fields", "#", ""]) + rng.choice(_LINE_ENDS))
        out.append(line + rng.choice(_LINE_ENDS))
    return "".join(out)


def _trec_expressible(run_map: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The run less what TREC cannot say: ids holding a C space, empty rankings."""
    kept = {q: {d: s for d, s in docs.items() if not _C_SPACE & set(d)} for q, docs in run_map.items() if not _C_SPACE & set(q)}
    return {q: docs for q, docs in kept.items() if docs}


def _assert_identical(got: Evaluation, want: Evaluation) -> None:
    assert got.per_query.query_ids == want.per_query.query_ids
    assert got.counts == want.counts
    for measure in want.measures:
        assert got.per_query.values[measure].tobytes() == want.per_query.values[measure].tobytes(), measure
    assert got.means() == want.means()


def _pytrec_rows(qrels: dict[str, dict[str, int]], run_map: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    cuts = "1,3,5,10,100,1000"
    evaluator = pytrec_eval.RelevanceEvaluator(copy.deepcopy(qrels), {f"ndcg_cut.{cuts}", f"map_cut.{cuts}", f"recall.{cuts}", f"P.{cuts}"})
    return evaluator.evaluate(copy.deepcopy(run_map))


@pytest.mark.parametrize("seed", range(60))
def test_blocks_equal_the_whole_run_and_pytrec_eval(tmp_path: Path, seed: int) -> None:
    qrels, run_map, _ = generate_case(seed)
    run_map = _trec_expressible(run_map)
    if not run_map:
        run_map = {"x1": {"d1": 0.5}}
    rng = random.Random(seed)
    path = tmp_path / "run.trec"
    path.write_bytes(_trec_text(run_map, rng).encode("utf-8"))
    # Blocks of a few lines: queries cross them, and some are longer than a block.
    block = rng.choice([64, 200, 1000, 1 << 16])
    for policy in (Policy.STRICT, Policy.COIR):
        got = evaluate_trec_file(qrels, path, MEASURES, policy, block_bytes=block)
        assert got is not None, "the block path must take a well-formed run"
        _assert_identical(got, evaluate(qrels, read_run(path), MEASURES, policy))
    level_2 = evaluate_trec_file(qrels, path, MEASURES, Policy.STRICT, relevance_level=2, block_bytes=block)
    assert level_2 is not None
    _assert_identical(level_2, evaluate(qrels, read_run(path), MEASURES, Policy.STRICT, relevance_level=2))
    # And pytrec_eval's numbers (its float32 ranking is lossless on these scores), per query; absent queries score 0.
    strict = evaluate_trec_file(qrels, path, MEASURES, Policy.STRICT, block_bytes=block)
    assert strict is not None
    rows = _pytrec_rows(qrels, run_map)
    names = {"NDCG": "ndcg_cut_{}", "MAP": "map_cut_{}", "Recall": "recall_{}", "P": "P_{}"}
    for i, query_id in enumerate(strict.per_query.query_ids):
        for measure, column in strict.per_query.values.items():
            family = measure.family.value
            if family in names:
                want = rows[query_id][names[family].format(measure.cutoff)] if query_id in rows else 0.0
                assert abs(column[i] - want) <= TOLERANCE, (query_id, str(measure), column[i], want)


@pytest.mark.parametrize("seed", range(4))
def test_a_query_whose_lines_are_apart_is_read_whole_with_the_same_numbers(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    run_map = {f"q{q}": {f"d{d}": rng.choice([0.5, 1.0, 0.25]) for d in rng.sample(range(50), 20)} for q in range(6)}
    qrels = {f"q{q}": {f"d{d}": rng.choice([0, 1, 2]) for d in rng.sample(range(50), 10)} for q in range(7)}
    path = tmp_path / "run.trec"
    path.write_text(_trec_text(run_map, rng, together=False), encoding="utf-8")
    assert evaluate_trec_file(qrels, path, MEASURES, block_bytes=128) is None
    result = invoke("score", "--qrels", _write_qrels(tmp_path, qrels), "--run", path, "--format", "json", "--measure", "NDCG@10,MAP@100")
    whole = evaluate(qrels, read_run(path), parse_measures(["NDCG@10", "MAP@100"]))
    assert f'"NDCG@10": {whole.means()["NDCG@10"]!r}' in result.stdout


def test_many_judged_documents_in_one_query_are_sorted_not_counted(tmp_path: Path) -> None:
    # 300 judged documents retrieved by one query, scores in three values: ties decided by doc id, byte-wise.
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(400)] + ["é1", "e1", "日本", "Z", "z", "a😀"]
    run_map = {"q": {d: rng.choice([1.0, 2.0, 3.0]) for d in docs}, "r": {d: 1.0 for d in docs[:70]}}
    qrels = {"q": {d: rng.choice([0, 1, 2, 3]) for d in rng.sample(docs, 300)}, "r": {d: 1 for d in docs[:60]}}
    path = tmp_path / "run.trec"
    path.write_text(_trec_text(run_map, rng), encoding="utf-8")
    for policy in (Policy.STRICT, Policy.COIR):
        got = evaluate_trec_file(qrels, path, MEASURES, policy, block_bytes=256)
        assert got is not None
        _assert_identical(got, evaluate(qrels, read_run(path), MEASURES, policy))
    # Independently: q's ranking is (score, doc id bytes) descending; NDCG@10 from it.
    ranking = sorted(run_map["q"], key=lambda d: (run_map["q"][d], d.encode()), reverse=True)
    gains = [qrels["q"].get(d, 0) for d in ranking[:10]]
    dcg = sum(max(g, 0) / np.log2(i + 2) for i, g in enumerate(gains))
    ideal = sorted((g for g in qrels["q"].values() if g > 0), reverse=True)[:10]
    idcg = sum(g / np.log2(i + 2) for i, g in enumerate(ideal))
    got = evaluate_trec_file(qrels, path, parse_measures(["NDCG@10"]), block_bytes=256)
    assert got is not None
    assert abs(got.per_query.values[parse_measures(["NDCG@10"])[0]][0] - dcg / idcg) <= TOLERANCE


def _scores_of(tmp_path: Path, texts: list[str]) -> np.ndarray:
    path = tmp_path / "scores.trec"
    path.write_text("".join(f"q Q0 d{i} 1 {text} t\n" for i, text in enumerate(texts)), encoding="utf-8")
    blocks = [raw.scan() for raw in trec_scan.iter_raw_blocks(path)]
    assert len(blocks) == 1
    return blocks[0].scores[: blocks[0].count].copy()


def test_scores_are_the_doubles_python_reads(tmp_path: Path) -> None:
    rng = random.Random(3)
    texts = ["0", "-0", "-0.0", "5.", ".5", "+1.25", "1e5", "1E-5", "2e+22", "9007199254740993", "0.1", "123456789012345678", "1e-400"]
    texts += ["0.000000000000000000000000000123", "1.7976931348623157e308", "4.9e-324", "00012.50000", "3.14159265358979323846"]
    for _ in range(3000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 19)))
        point = rng.randint(0, len(digits))
        text = rng.choice(["", "-", "+"]) + digits[:point] + "." + digits[point:]
        if rng.random() < 0.3:
            text += rng.choice("eE") + rng.choice(["", "-", "+"]) + str(rng.randint(0, 30))
        texts.append(text)
    texts.append(repr(rng.random()))
    scores = _scores_of(tmp_path, texts)
    assert scores.tobytes() == np.array([float(t) for t in texts]).tobytes()


def _write_qrels(tmp_path: Path, qrels: dict[str, dict[str, int]]) -> Path:
    path = tmp_path / "qrels.tsv"
    path.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, docs in qrels.items() for d, r in docs.items()), encoding="utf-8"
    )
    return path


def _line_reader_refusal(path: Path) -> str:
    with pytest.raises(RunFormatError) as caught:
        readers._read_trec_lines(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", "r.trec:2: docid: document 'd1' appears twice for query 'q1'"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 inf t\n", "r.trec:2: score: score must be finite, got 'inf'"),
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 1e999 t\n", "r.trec:2: score: score must be finite, got '1e999'"),
        ("q1 Q0 d1 1 abc t\n", "r.trec:1: score: score is not a number: 'abc'"),
        ("q1 Q0 d1 1 0.5\n", "r.trec:1: expected 6 whitespace-separated fields"),
        ("# c\n\nq1 Q0 d1 1 0.5 t\r\nq1\tQ0 d2 2\r\n", "r.trec:4: expected 6 whitespace-separated fields"),
        ("q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 0.5 t\nq1 Q0 d1 1 0.3 t\n", "r.trec:3: docid: document 'd1' appears twice for query 'q1'"),
        ("q1 Q0 d\x001 1 0.5 t\n", "r.trec: doc_id 'd\\x001': query 'q1': identifier must not contain NUL, tab or line breaks"),
    ],
)
def test_refusals_are_the_line_readers(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "r.trec"
    path.write_text(content, encoding="utf-8")
    qrels = _write_qrels(tmp_path, {"q1": {"d1": 1}})
    result = invoke("score", "--qrels", qrels, "--run", path, expect=2)
    message = result.stderr.strip().splitlines()
    assert len(message) == 1 and expected in message[0]
    assert str(path) in message[0]
    assert _line_reader_refusal(path) in message[0]


def test_bytes_that_are_not_utf8_are_refused_as_before(tmp_path: Path) -> None:
    path = tmp_path / "r.trec"
    path.write_bytes(b"q1 Q0 d1 1 0.5 t\nq1 Q0 d\xff 2 0.4 t\n")
    qrels = _write_qrels(tmp_path, {"q1": {"d1": 1}})
    # Detected: the format detection's refusal, as before; named TREC: the line reader's.
    with pytest.raises(RunFormatError) as caught:
        read_run(path)
    assert invoke("score", "--qrels", qrels, "--run", path, expect=2).stderr == f"error: {caught.value}\n"
    named = invoke("score", "--qrels", qrels, "--run", path, "--run-format", "trec", expect=2).stderr
    assert named == f"error: {_line_reader_refusal(path)}\n" and "not UTF-8 text" in named


def test_a_bad_line_deep_in_a_large_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 200,000 lines, read by 64 KiB blocks; line 187,654 lacks its tag.
    monkeypatch.setattr(trec_scan, "BLOCK_BYTES", 1 << 16)
    bad = 187_654
    lines = [f"q{n // 100} Q0 d{n % 100} {n % 100 + 1} {1 - (n % 100) / 1000} run\n" for n in range(200_000)]
    lines[bad - 1] = lines[bad - 1].removesuffix(" run\n") + "\n"
    path = tmp_path / "big.trec"
    path.write_text("".join(lines), encoding="utf-8")
    result = invoke("score", "--qrels", _write_qrels(tmp_path, {"q5": {"d3": 1}}), "--run", path, expect=2)
    assert (
        result.stderr.strip()
        == f"error: {path}:{bad}: expected 6 whitespace-separated fields (qid Q0 docid rank score tag; any after the tag are ignored), got 5"
    )


def test_gzip_and_comments_longer_than_a_block(tmp_path: Path) -> None:
    rng = random.Random(11)
    run_map = {f"q{q}": {f"d{d}": rng.choice([0.5, 1.0, 0.75]) for d in rng.sample(range(60), 25)} for q in range(8)}
    qrels = {f"q{q}": {f"d{d}": rng.choice([0, 1, 2]) for d in rng.sample(range(60), 12)} for q in range(9)}
    text = "# " + "x" * 3000 + "\n" + "#\n" * 5000 + _trec_text(run_map, rng) + "# trailing\n" * 300
    plain = tmp_path / "run.trec"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "run.trec.gz"
    packed.write_bytes(gzip.compress(text.encode(), mtime=0))
    want = evaluate(qrels, read_run(plain), MEASURES)
    for path in (plain, packed):
        got = evaluate_trec_file(qrels, path, MEASURES, block_bytes=256)
        assert got is not None
        _assert_identical(got, want)
    # The 3,000-byte line and queries of ~1 KB widen buffers to a few KiB; the 10 KB of comment lines widen none
    # (they belong to no query: a buffer holding only comments is cut whole).
    assert max(len(raw.data) for raw in trec_scan.iter_raw_blocks(plain, block_bytes=256)) <= 8192
