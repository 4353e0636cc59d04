"""Fuzzing what a submission controls: malformed runs, vectors, manifests and stats, seeded and bounded.

Each generated input goes through every reader that takes it: ``grader score``'s
run readers (and the command itself for a sample), the sandbox's output readers
(``read_run_output``, ``read_embeddings_output``, ``read_encoding_stats``), the
``grader check`` validator and the manifest loader. The only outcomes allowed are
the documented ones: a value, or a :class:`GraderError` of the documented kind (a
``RunFormatError`` for a run, a ``TaskFailure`` with an output code for a
container's output, a ``SubmissionError`` for a manifest), one line, bounded,
with no raw control characters. Anything else (``RecursionError``, ``KeyError``,
``OverflowError``...) fails the test and names the seed and the input.
"""

from __future__ import annotations

import io
import json
import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.collect.outputs import read_embeddings_output, read_encoding_stats, read_run_output
from grader.collect.validate import validate_run_file
from grader.errors import GraderError, RunFormatError, SubmissionError, TaskFailure
from grader.runs.readers import RunFormat, read_run
from grader.submissions.manifest import load_manifest
from grader.text import MAX_ERROR_LINE
from tests.onnx_models import onnx_submission

SEED = 20261201
QUERIES = ["q1", "q2", "q3"]
DOCS = ["d1", "d2", "d3", "d4"]

# Pieces a mutation splices in: each has broken some JSON reader somewhere.
NASTY = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-0.0",
    "1" * 5000,
    "[" * 5000,
    "{" * 3000,
    "]" * 50,
    "}",
    '"\\ud800"',
    '"\x1b[2J\x1b]0;t\x07"',
    '"' + "A" * 200_000 + '"',
    "null",
    "true",
    '""',
    "[]",
    "{}",
    '"query_id"',
    '"hits"',
    '"id"',
    '"score"',
    ",",
    ":",
    "\\",
    '"',
    "\x00",
    "\u202e",
    "\n",
]


def _valid_lines(rng: random.Random) -> list[str]:
    lines = []
    for query in QUERIES:
        docs = rng.sample(DOCS, rng.randint(0, len(DOCS)))
        lines.append(json.dumps({"query_id": query, "hits": [{"id": d, "score": rng.uniform(-5, 5)} for d in docs]}))
    return lines


def _mutate_text(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        at = rng.randint(0, len(text))
        if choice < 0.45:
            text = text[:at] + rng.choice(NASTY) + text[at:]
        elif choice < 0.65:
            end = min(len(text), at + rng.randint(1, 20))
            text = text[:at] + text[end:]
        elif choice < 0.8:
            end = min(len(text), at + rng.randint(1, 12))
            text = text[:at] + rng.choice(NASTY) + text[end:]
        else:
            # a structural fault with valid syntax: duplicate keys, wrong types, deep values
            text = text.replace(
                '"score": ',
                rng.choice(['"score": "1", "score": ', '"score": [' * 3000 + "1" + "]" * 3000 + ', "x": ', '"score": {"a": 1}, "z": ']),
                1,
            )
    return text


def malformed_runs(count: int, seed: int) -> list[bytes]:
    """``count`` JSONL runs, most of them broken in one to four places."""
    rng = random.Random(seed)
    runs = []
    for _ in range(count):
        lines = _valid_lines(rng)
        index = rng.randrange(len(lines))
        lines[index] = _mutate_text(rng, lines[index])
        if rng.random() < 0.1:
            lines.append(lines[0])  # a query twice
        data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
        if rng.random() < 0.1:
            cut = rng.randrange(len(data))
            data = data[:cut] + bytes([rng.choice([0xFF, 0xC3, 0x80, 0x00])]) + data[cut:]
        runs.append(data)
    return runs


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def malformed_vectors(count: int, seed: int, rows: int) -> list[bytes]:
    """``count`` .npy files: wrong dtype, shape, order, values, headers, truncation, pickles."""
    rng = random.Random(seed)
    good = np.random.default_rng(seed).standard_normal((rows, 4)).astype(np.float32)
    makers: list[Callable[[], bytes]] = [
        lambda: _npy(good),
        lambda: _npy(good.astype(np.float64)),
        lambda: _npy(good.astype(np.float16)),
        lambda: _npy(good[:-1]),
        lambda: _npy(good[:, :0]),
        lambda: _npy(good.reshape(-1)),
        lambda: _npy(good.reshape(rows, 2, 2)),
        lambda: _npy(np.asfortranarray(good)),
        lambda: _npy(
            np.where(np.arange(good.size).reshape(good.shape) == rng.randrange(good.size), np.float32(rng.choice([np.nan, np.inf, -np.inf])), good)
        ),
        lambda: _npy(good * np.float32(1e30)),
        lambda: _npy(np.array([{"a": 1}] * rows, dtype=object)),
        lambda: _npy(good.astype(">f4")),
        lambda: _npy(good)[: rng.randrange(1, len(_npy(good)))],
        lambda: (
            b"\x93NUMPY\x01\x00" + struct.pack("<H", 60) + b"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 4), }".ljust(60)[:60]
        ),
        lambda: b"\x93NUMPY\x09\x09" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))),
        lambda: bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))),
        lambda: b"",
    ]
    return [rng.choice(makers)() for _ in range(count)]


def malformed_manifests(count: int, seed: int) -> list[str]:
    """``count`` submission.json texts derived from a valid ONNX manifest."""
    rng = random.Random(seed)
    base = {
        "kind": "onnx",
        "name": "fuzz",
        "model": "model.onnx",
        "tokenizer": "tokenizer.json",
        "max_length": 16,
        "pooling": "mean",
        "normalize": True,
    }
    texts = []
    for _ in range(count):
        data: dict[str, Any] = dict(base)
        for _ in range(rng.randint(0, 3)):
            key = rng.choice([*base, "image", "mode", "training", "query_prefix", "output", "extra"])
            data[key] = rng.choice(
                [
                    None,
                    -1,
                    0,
                    10**30,
                    1.5,
                    "",
                    "../../etc/passwd",
                    "/etc/hostname",
                    "model.onnx",
                    "x" * 5000,
                    [],
                    {},
                    {"setting": "zero-shot"},
                    "docker",
                    "retrieve",
                    True,
                ]
            )
        text = json.dumps(data)
        if rng.random() < 0.6:
            text = _mutate_text(rng, text)
        texts.append(text)
    return texts


def _assert_documented(error: BaseException, allowed: type[GraderError], label: str) -> None:
    assert isinstance(error, allowed), f"{label}: {type(error).__name__}: {str(error)[:300]}"
    message = str(error)
    assert "\n" not in message and len(message) <= MAX_ERROR_LINE + 100, f"{label}: unbounded message ({len(message)} chars)"
    assert message.isprintable(), f"{label}: raw control characters in {message[:200]!r}"


def _outcome(call: Callable[[], Any], allowed: type[GraderError], label: str) -> Any:
    try:
        return call()
    except GraderError as error:
        _assert_documented(error, allowed, label)
        return error
    except Exception as error:  # the point of the test: nothing else may escape
        pytest.fail(f"{label}: undocumented {type(error).__name__}: {str(error)[:300]}")


def test_malformed_runs_through_the_score_readers_and_the_sandbox_readers(tmp_path: Path) -> None:
    runs = malformed_runs(300, SEED)
    out = tmp_path / "output"
    out.mkdir()
    refused = 0
    for number, data in enumerate(runs):
        label = f"seed {SEED} run #{number}"
        path = tmp_path / f"run-{number}.jsonl"
        path.write_bytes(data)
        score_side = _outcome(lambda path=path: read_run(path, RunFormat.JSONL), RunFormatError, label + " (grader score)")
        (out / "run.jsonl").write_bytes(data)
        sandbox_side = _outcome(
            lambda: read_run_output(out, query_ids=QUERIES, doc_ids=DOCS, top_k=10, max_bytes=1 << 22), TaskFailure, label + " (sandbox)"
        )
        if isinstance(sandbox_side, TaskFailure):
            assert sandbox_side.code.about_outputs, label
            refused += 1
        # grader score and the sandbox agree on what is a readable run (the sandbox also checks ids)
        if isinstance(score_side, RunFormatError):
            assert isinstance(sandbox_side, TaskFailure), label
        validation = _outcome(
            lambda: validate_run_file(out / "run.jsonl", query_ids=QUERIES, doc_ids=DOCS, top_k=10), GraderError, label + " (check)"
        )
        assert not isinstance(validation, GraderError), label
        if isinstance(sandbox_side, TaskFailure) and sandbox_side.code == "OUTPUT_INVALID":
            assert validation.errors, f"{label}: check found nothing wrong in what grading refused: {sandbox_side}"
        for line in validation.errors:
            assert line.isprintable() or "\\" in line, label
    assert 150 < refused < 300  # the generator makes mostly broken, some valid runs


def test_malformed_runs_through_the_grader_score_command(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n", encoding="utf-8")
    for number, data in enumerate(malformed_runs(25, SEED + 1)):
        for fmt in ("jsonl", "json", "trec"):
            run = tmp_path / f"run-{number}.{fmt}"
            run.write_bytes(data)
            result = CliRunner().invoke(cli, ["score", "--qrels", str(qrels), "--run", str(run), "--run-format", fmt])
            label = f"seed {SEED + 1} run #{number} as {fmt}"
            assert result.exit_code in (0, 2), f"{label}: exit {result.exit_code}: {result.exception!r}"
            if result.exit_code == 2:
                assert result.stderr.startswith("error: ") and len(result.stderr) < MAX_ERROR_LINE + 200, label
                assert "\x1b" not in result.stderr, label


def test_malformed_vectors_through_the_sandbox_reader(tmp_path: Path) -> None:
    rows = 5
    outcomes: set[str] = set()
    for number, data in enumerate(malformed_vectors(200, SEED, rows)):
        (tmp_path / "corpus.npy").write_bytes(data)
        label = f"seed {SEED} vectors #{number}"
        result = _outcome(lambda: read_embeddings_output(tmp_path, "corpus.npy", rows=rows, max_bytes=1 << 20, dimension=None), TaskFailure, label)
        if isinstance(result, TaskFailure):
            assert result.code.about_outputs, label
            outcomes.add(result.code)
        else:
            assert result.dtype == np.float32 and result.shape == (rows, 4) and np.isfinite(result).all(), label
            outcomes.add("read")
    assert outcomes == {"read", "OUTPUT_INVALID"}


def test_malformed_encoding_stats_are_ignored_not_trusted(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    valid = json.dumps(
        {
            "queries": {"texts": 3, "truncated": 1, "truncated_share": 0.5},
            "corpus": {"texts": 4, "truncated": 0, "truncated_share": 0.0},
            "dimension": 8,
        }
    )
    accepted = 0
    for number in range(200):
        text = valid if number == 0 else _mutate_text(rng, valid)
        (tmp_path / "encoding.json").write_bytes(text.encode("utf-8", "surrogatepass"))
        stats = _outcome(lambda: read_encoding_stats(tmp_path), GraderError, f"seed {SEED} stats #{number}")
        assert stats is None or isinstance(stats, dict)
        if stats is not None:
            accepted += 1
            assert stats["queries"]["truncated_share"] == stats["queries"]["truncated"] / stats["queries"]["texts"]
    assert accepted >= 1


def test_malformed_manifests_are_submission_errors(tmp_path: Path) -> None:
    folder = onnx_submission(tmp_path / "sub")
    loaded = 0
    for number, text in enumerate(malformed_manifests(200, SEED)):
        (folder / "submission.json").write_bytes(text.encode("utf-8", "surrogatepass"))
        result = _outcome(lambda: load_manifest(folder), SubmissionError, f"seed {SEED} manifest #{number}")
        if not isinstance(result, GraderError):
            loaded += 1
    assert 0 < loaded < 200
