"""``grader sketch-training`` and the sketch file: inputs, determinism, the cap, and the strict reader."""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from grader.errors import UsageError
from grader.integrity.sketch_file import MAGIC, SketchFileError, TrainingSketch, encode, encoded_size, read_sketch
from grader.integrity.sketch_text import SketchParameters
from tests.cli_support import invoke
from tests.contamination_support import snippet


def _functions(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [snippet(rng, rng.randint(6, 12)).render() for _ in range(count)]


@pytest.fixture
def training(tmp_path: Path) -> Path:
    """A folder of training data: plain files in a nested folder and a JSONL corpus."""
    root = tmp_path / "training"
    (root / "src" / "deep").mkdir(parents=True)
    texts = _functions(1, 6)
    for position, text in enumerate(texts[:4]):
        (root / "src" / ("deep" if position % 2 else "") / f"f{position}.py").write_text(text, encoding="utf-8")
    lines = [{"_id": "a", "title": "", "text": texts[4]}, {"_id": "b", "text": texts[5]}]
    (root / "corpus.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    (root / "binary.dat").write_bytes(b"\xff\xfe\x00 not utf-8")
    return root


def test_the_sketch_holds_one_row_per_distinct_window_and_reads_back(tmp_path: Path, training: Path) -> None:
    out = tmp_path / "s.sketch"
    result = invoke("sketch-training", training, "--out", out, "--quiet")
    sketch = read_sketch(out)
    # Six functions of 6-12 statements: each one window, all distinct (the generator's names are random).
    assert sketch.count == 6
    assert sketch.parameters == SketchParameters()
    assert out.stat().st_size == 48 + 6 * 128 * 2 + 32
    assert "6 distinct signatures (windows and statement sets) of 6 texts from 6 file(s)" in result.stdout
    assert "1 file(s) not UTF-8, skipped" in result.stdout


def test_output_is_deterministic_and_independent_of_how_the_inputs_are_laid_out(tmp_path: Path, training: Path) -> None:
    invoke("sketch-training", training, "--out", tmp_path / "a", "--quiet")
    invoke("sketch-training", training, "--out", tmp_path / "b", "--quiet")
    # The same texts as one JSONL file, in reverse order and with one repeated: the same bytes.
    texts = [path.read_text(encoding="utf-8") for path in sorted((training / "src").rglob("*.py"))]
    texts += [json.loads(line)["text"] for line in (training / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    corpus = tmp_path / "all.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in [*reversed(texts), texts[0]]), encoding="utf-8")
    invoke("sketch-training", corpus, "--out", tmp_path / "c", "--quiet")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == (tmp_path / "c").read_bytes()


def test_a_gzipped_corpus_gives_the_bytes_of_the_plain_one_and_a_broken_one_is_one_line(tmp_path: Path) -> None:
    import gzip

    lines = "".join(json.dumps({"text": text}) + "\n" for text in _functions(4, 5))
    (tmp_path / "c.jsonl").write_text(lines, encoding="utf-8")
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(lines.encode("utf-8")))
    invoke("sketch-training", tmp_path / "c.jsonl", "--out", tmp_path / "plain", "--quiet")
    result = invoke("sketch-training", tmp_path / "c.jsonl.gz", "--out", tmp_path / "gz")
    assert (tmp_path / "plain").read_bytes() == (tmp_path / "gz").read_bytes()
    size = (tmp_path / "c.jsonl.gz").stat().st_size
    assert f"bytes of training data read: {size}/{size} (100%" in result.stderr
    (tmp_path / "broken.jsonl.gz").write_bytes(gzip.compress(lines.encode("utf-8"))[:-20])
    result = invoke("sketch-training", tmp_path / "broken.jsonl.gz", "--out", tmp_path / "b", expect=2)
    assert f"error: {tmp_path / 'broken.jsonl.gz'}: cannot read the file: Compressed file ended" in result.stderr
    assert not (tmp_path / "b").exists()


def test_progress_counts_the_bytes_read_on_stderr(tmp_path: Path, training: Path) -> None:
    total = sum(path.stat().st_size for path in training.rglob("*") if path.is_file())
    result = invoke("sketch-training", training, "--out", tmp_path / "s")
    assert f"bytes of training data read: {total}/{total} (100%" in result.stderr


def test_a_bad_jsonl_line_names_file_line_and_field(tmp_path: Path) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"text": "x = 1"}\n{"text": 3}\n', encoding="utf-8")
    result = invoke("sketch-training", corpus, "--out", tmp_path / "s", expect=2)
    assert f"{corpus}:2: text: expected a string" in result.stderr
    assert not (tmp_path / "s").exists()


def test_a_missing_path_is_one_line(tmp_path: Path) -> None:
    result = invoke("sketch-training", tmp_path / "nowhere", "--out", tmp_path / "s", expect=2)
    assert f"{tmp_path / 'nowhere'}: no such file or folder" in result.stderr


def test_a_sketch_over_the_cap_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    corpus = tmp_path / "many.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in _functions(2, 40)), encoding="utf-8")
    cap = encoded_size(10, 128)
    result = invoke("sketch-training", corpus, "--out", tmp_path / "s", "--max-bytes", cap, expect=2)
    assert f"over the {cap}-byte cap" in result.stderr
    assert not (tmp_path / "s").exists()
    # One window per function, and a statement set for those of at most 64 code tokens.
    invoke("sketch-training", corpus, "--out", tmp_path / "s", "--max-bytes", encoded_size(80, 128), "--quiet")
    assert 40 <= read_sketch(tmp_path / "s", max_bytes=encoded_size(80, 128)).count <= 80


def test_a_version_1_sketch_is_read_and_compared_as_the_grader_that_made_it_did(tmp_path: Path) -> None:
    from grader.integrity.contamination import find_copies
    from grader.integrity.sketch_build import build_sketch
    from grader.integrity.sketch_file import VERSION_1

    long_item = _functions(11, 1)[0]
    short_item = "def f(x):\n    y = g(x, 1)\n    z = y * 2\n    return z\n"
    # Version 1's layout, written here by hand: a 40-byte header, then the rows (windows only).
    rows = build_sketch([long_item, short_item], VERSION_1).rows
    assert len(rows) == 1  # the long item's window; the short one had no row in version 1
    header = b"GRSKETCH" + struct.pack(">HHHBBHHHHQQ", 1, 1, 128, 4, 3, 256, 128, 40, 8, 20261203, len(rows))
    data = _with_digest(header + rows.astype(">u2").tobytes())
    (tmp_path / "old.sketch").write_bytes(data)
    sketch = read_sketch(tmp_path / "old.sketch")
    assert sketch.parameters == VERSION_1 and len(data) == 40 + 128 * 2 + 32
    # Re-encoded as its own version (the hosted report names a sketch by the digest of these bytes).
    assert encode(sketch) == data
    # Compared as before: the long item found by its window; the short one not audited (no statement sets).
    matches = find_copies(sketch, [long_item, short_item])
    assert matches.audited.tolist() == [True, False] and matches.found.tolist() == [True, False]


def test_fine_windows_of_long_code_can_be_left_out_and_the_sketch_is_still_read(tmp_path: Path) -> None:
    from grader.integrity.contamination import find_copies
    from tests.contamination_support import disguised_copy

    rng = random.Random(9)
    item = snippet(rng, 6)
    around = [snippet(rng, 10).render() for _ in range(12)]
    (tmp_path / "long.py").write_text("\n".join([*around[:6], disguised_copy(item, rng), *around[6:]]), encoding="utf-8")
    invoke("sketch-training", tmp_path / "long.py", "--out", tmp_path / "fine", "--quiet")
    invoke("sketch-training", tmp_path / "long.py", "--out", tmp_path / "coarse", "--no-fine-windows", "--quiet")
    fine, coarse = read_sketch(tmp_path / "fine"), read_sketch(tmp_path / "coarse")
    assert (coarse.parameters.fine_window_tokens, coarse.parameters.fine_window_stride) == (0, 0)
    # Windows of 256 every 128 against fine windows of 80 every 40 besides: about four times the rows.
    assert 3 * coarse.count <= fine.count <= 6 * coarse.count
    # The six-statement item copied inside is found through a fine window only.
    assert find_copies(fine, [item.render()]).found.tolist() == [True]
    assert find_copies(coarse, [item.render()]).found.tolist() == [False]
    # Only both fields 0 means "without": one of them 0 is refused.
    body = (tmp_path / "coarse").read_bytes()[:-32]
    assert _refusal(tmp_path, _with_digest(body[:34] + struct.pack(">H", 40) + body[36:])).endswith(
        "fine_window_tokens: 0; this grader compares sketches made with 80 (or 0, without fine windows)"
    )


def _sketch_bytes(rows: int = 3) -> bytes:
    data = np.sort(np.random.default_rng(0).integers(0, 1 << 16, size=(rows, 128), dtype=np.uint16), axis=0)
    return encode(TrainingSketch(SketchParameters(), np.unique(data, axis=0)))


def _with_digest(body: bytes) -> bytes:
    return body + hashlib.sha256(body).digest()


def _refusal(tmp_path: Path, data: bytes, **kwargs: int) -> str:
    path = tmp_path / "s.sketch"
    path.write_bytes(data)
    with pytest.raises(SketchFileError) as caught:
        read_sketch(path, **kwargs)
    return str(caught.value)


def test_the_reader_refuses_anything_but_the_format(tmp_path: Path) -> None:
    good = _sketch_bytes()
    body = good[:-32]
    path = f"{tmp_path / 's.sketch'}"
    assert _refusal(tmp_path, b"NOTASKET" + good[8:]).startswith(f"{path}: magic: not a training sketch")
    assert (
        _refusal(tmp_path, _with_digest(body[:8] + struct.pack(">H", 3) + body[10:]))
        == f"{path}: format_version: format version 3; this grader reads versions 1 and 2"
    )
    # A version-1 header's parameters are its own: normalisation 1, nothing else.
    version_1 = _with_digest(b"GRSKETCH" + struct.pack(">HHHBBHHHHQQ", 1, 2, 128, 4, 3, 256, 128, 40, 8, 20261203, 0))
    assert _refusal(tmp_path, version_1) == f"{path}: normalisation: 2; this grader compares sketches made with 1"
    assert _refusal(tmp_path, _with_digest(body[:10] + struct.pack(">H", 1) + body[12:])).startswith(f"{path}: normalisation: 1;")
    assert _refusal(tmp_path, _with_digest(body[:12] + struct.pack(">H", 64) + body[14:])).startswith(f"{path}: num_perm: 64;")
    assert _refusal(tmp_path, _with_digest(body[:24] + struct.pack(">Q", 7) + body[32:])).startswith(f"{path}: seed: 7;")
    assert _refusal(tmp_path, _with_digest(body[:32] + struct.pack(">H", 96) + body[34:])).startswith(f"{path}: fine_window_tokens: 96;")
    assert _refusal(tmp_path, _with_digest(body[:34] + struct.pack(">H", 32) + body[36:])).startswith(f"{path}: fine_window_stride: 32;")
    assert _refusal(tmp_path, _with_digest(body[:36] + struct.pack(">H", 80) + body[38:])).startswith(f"{path}: statement_max_tokens: 80;")
    assert _refusal(tmp_path, _with_digest(body[:38] + struct.pack(">H", 2) + body[40:])).startswith(f"{path}: statement_min: 2;")
    assert _refusal(tmp_path, good[:-33]).startswith(f"{path}: count: says 3 signatures")
    tampered = bytearray(good)
    tampered[50] ^= 1
    assert _refusal(tmp_path, bytes(tampered)) == f"{path}: sha256: the digest does not match the file's contents (truncated or altered)"
    rows = np.frombuffer(body, dtype=">u2", offset=48).reshape(3, 128)
    swapped = body[:48] + rows[[1, 0, 2]].tobytes()
    assert _refusal(tmp_path, _with_digest(swapped)) == f"{path}: signatures: row 1 is not after row 0 (rows must be distinct and sorted)"
    repeated = body[:40] + struct.pack(">Q", 4) + body[48:] + rows[2].tobytes()
    assert _refusal(tmp_path, _with_digest(repeated)) == f"{path}: signatures: row 3 is not after row 2 (rows must be distinct and sorted)"
    assert _refusal(tmp_path, b"GR").startswith(f"{path}: header: 2 bytes")
    assert MAGIC == b"GRSKETCH"


def test_the_reader_reads_no_more_than_its_cap_and_follows_no_link(tmp_path: Path) -> None:
    good = _sketch_bytes(rows=50)
    assert "larger than 1000 bytes" in _refusal(tmp_path, good, max_bytes=1000)
    target = tmp_path / "real.sketch"
    target.write_bytes(good)
    link = tmp_path / "link.sketch"
    os.symlink(target, link)
    with pytest.raises(SketchFileError, match="symbolic link"):
        read_sketch(link)
    assert read_sketch(target).count == 50


def test_write_refuses_a_sketch_over_the_cap(tmp_path: Path) -> None:
    from grader.integrity.sketch_file import write_sketch

    sketch = TrainingSketch(SketchParameters(), np.zeros((2, 128), dtype=np.uint16))
    with pytest.raises(UsageError, match="over the 100-byte cap"):
        write_sketch(tmp_path / "s", sketch, max_bytes=100)


def test_short_code_is_sketched_as_a_statement_set_and_found_while_shorter_texts_give_an_empty_sketch(tmp_path: Path) -> None:
    from grader.integrity.contamination import find_copies

    # Under the window minimum (40 code tokens) but of three statements or more: one statement-set row, found.
    short = tmp_path / "short.py"
    short.write_text("def f(x):\n    y = g(x, 1)\n    z = y * 2\n    return z\n", encoding="utf-8")
    invoke("sketch-training", short, "--out", tmp_path / "s", "--quiet")
    sketch = read_sketch(tmp_path / "s")
    assert sketch.count == 1
    # Renamed, re-commented, re-spaced, the call wrapped over two lines and two statements swapped: found; the same
    # shape with another constant: not found.
    renamed = "def h(a):\n  b=k(a,\n        1)  # one more\n  return c\n  c = b * 2\n"
    other = "def h(a):\n    b = k(a, 2)\n    c = b * 2\n    return c\n"
    matches = find_copies(sketch, [renamed, other, _functions(3, 1)[0]])
    assert matches.audited.tolist() == [True, True, True] and matches.found.tolist() == [True, False, False]
    # Fewer than three statements, or prose under eight words: nothing is sketched, nothing audited.
    tiny = tmp_path / "tiny.py"
    tiny.write_text("def f(x):\n    return x + 1\n", encoding="utf-8")
    (tmp_path / "words.txt").write_text("a few words only\n", encoding="utf-8")
    invoke("sketch-training", tiny, tmp_path / "words.txt", "--out", tmp_path / "t", "--quiet")
    empty = read_sketch(tmp_path / "t")
    assert empty.count == 0 and (tmp_path / "t").stat().st_size == encoded_size(0, 128) == 80
    matches = find_copies(empty, [tiny.read_text(encoding="utf-8"), "a few words only", _functions(3, 1)[0]])
    assert matches.audited.tolist() == [False, False, True] and not matches.found.any()


def test_mutated_sketches_are_read_or_refused_with_one_line_never_a_crash(tmp_path: Path) -> None:
    # The digest would catch almost every mutation, so half of the mutants get a fresh digest: the checks behind it
    # (header fields, length, row order) must hold on their own.
    good = _sketch_bytes(rows=20)
    rng = random.Random(8)
    outcomes = {"read": 0, "refused": 0}
    for trial in range(400):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(data))
            data[position] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        mutant = bytes(data)
        if trial % 2:
            mutant = _with_digest(mutant[:-32])
        path = tmp_path / "m.sketch"
        path.write_bytes(mutant)
        try:
            sketch = read_sketch(path)
        except SketchFileError as error:
            assert str(error).startswith(f"{path}: ") and "\n" not in str(error)
            outcomes["refused"] += 1
        else:
            assert sketch.rows.shape == (sketch.count, 128)
            outcomes["read"] += 1
    assert outcomes["refused"] > 100 and outcomes["read"] > 0, outcomes


@pytest.mark.slow  # starts worker processes
def test_workers_give_the_same_bytes_as_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.integrity import sketch_build

    monkeypatch.setattr(sketch_build, "WORKER_BATCH", 7)  # many small batches, finishing in any order
    corpus = tmp_path / "many.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in _functions(6, 60)), encoding="utf-8")
    invoke("sketch-training", corpus, "--out", tmp_path / "one", "--quiet")
    invoke("sketch-training", corpus, "--out", tmp_path / "three", "--workers", 3, "--quiet")
    assert 60 <= read_sketch(tmp_path / "one").count <= 120  # a window per function, a statement set for the short ones
    assert (tmp_path / "one").read_bytes() == (tmp_path / "three").read_bytes()
