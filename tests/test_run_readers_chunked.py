"""The TREC fast reader and the ordering across many pieces, groups and chunks.

Real runs are gigabytes; here the piece, group and chunk sizes are shrunk so a
small file crosses every boundary, and the result must equal the line-by-line
reader's and a plain Python sort's.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import numpy as np
import pytest

import grader.runs.ordering as ordering
import grader.runs.readers as readers
from grader.errors import RunFormatError
from grader.runs.ordering import first_repeat, order_in_place


def _random_run(rng: random.Random, n_queries: int = 60) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        docs = rng.sample(range(400), rng.randint(0, 40))
        run[f"q{q}"] = {f"d{d}": rng.choice([0.5, 0.25, 1.0, float(rng.randint(0, 9)) / 8]) for d in docs}
    return run


def _write_trec(path: Path, run: dict[str, dict[str, float]], rng: random.Random, *, shuffle: bool) -> None:
    lines = [f"{q} Q0 {d} 0 {s!r} tag\n" for q, docs in run.items() for d, s in docs.items()]
    if shuffle:
        rng.shuffle(lines)
    data = "".join(lines).encode()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)


@pytest.fixture
def tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "_PIECE_BYTES", 1 << 10)
    monkeypatch.setattr(readers, "_BLOCK_BYTES", 1 << 9)
    monkeypatch.setattr(readers, "_GROUP_LINES", 37)
    monkeypatch.setattr(ordering, "CHUNK_ENTRIES", 53)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("suffix", [".trec", ".trec.gz"])
def test_fast_reader_equals_line_reader_across_boundaries(tiny_pieces: None, tmp_path: Path, seed: int, suffix: str) -> None:
    rng = random.Random(seed)
    run = _random_run(rng)
    path = tmp_path / f"run{suffix}"
    _write_trec(path, run, rng, shuffle=seed % 2 == 0)
    fast = readers._read_trec_arrow(path)
    slow = readers._read_trec_lines(path)
    assert fast.query_ids == slow.query_ids or sorted(fast.query_ids) == sorted(slow.query_ids)
    for query_id in slow.query_ids:
        expected = sorted(run[query_id].items(), key=lambda item: (item[1], item[0].encode()), reverse=True)
        assert fast.ranking(query_id) == expected
        assert slow.ranking(query_id) == expected


def test_duplicate_in_a_late_piece_is_reported_with_its_line(tiny_pieces: None, tmp_path: Path) -> None:
    rng = random.Random(3)
    run = _random_run(rng)
    path = tmp_path / "run.trec"
    _write_trec(path, run, rng, shuffle=False)
    first_query, docs = next((q, d) for q, d in run.items() if d)
    doc = next(iter(docs))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{first_query} Q0 {doc} 0 0.1 tag\n")
    n_lines = sum(len(d) for d in run.values()) + 1
    with pytest.raises(RunFormatError, match=rf"run.trec:{n_lines}: docid: document '{doc}' appears twice"):
        readers.read_run(path)


@pytest.mark.parametrize("seed", range(20))
def test_order_in_place_and_first_repeat_match_python(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 30, size=40)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(offsets[-1])
    vocab = 120
    codes = np.concatenate([rng.permutation(vocab)[:length] for length in lengths]).astype(np.int64) if n else np.empty(0, np.int64)
    scores = rng.choice([0.0, 0.5, 1.0, 2.0], size=n).astype(np.float64)
    ranks = rng.permutation(vocab).astype(np.int64)
    expected = []
    for i in range(len(lengths)):
        segment = list(zip(scores[offsets[i] : offsets[i + 1]], ranks[codes[offsets[i] : offsets[i + 1]]], codes[offsets[i] : offsets[i + 1]]))
        expected.extend(sorted(segment, key=lambda item: (item[0], item[1]), reverse=True))
    work_codes, work_scores = codes.copy(), scores.copy()
    order_in_place(offsets, work_codes, work_scores, ranks, max_entries=17)
    assert list(zip(work_scores, ranks[work_codes], work_codes)) == expected
    assert first_repeat(offsets, work_codes, max_entries=17) is None
    if n > 1:
        segment = int(np.flatnonzero(lengths >= 2)[0])
        duplicated = work_codes.copy()
        duplicated[offsets[segment] + 1] = duplicated[offsets[segment]]
        found = first_repeat(offsets, duplicated, max_entries=17)
        assert found is not None
