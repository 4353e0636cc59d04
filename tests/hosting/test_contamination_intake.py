"""The hosted contamination audit's intake and board line, without a server: a sketch inside a submission is read
strictly and bounded, and the board shows only what the release rule released (the served flow:
tests/hosting/test_contamination_hosted_docker.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from grader.errors import InternalError, SubmissionError
from grader.hosting.intake.upload_checks import check_submission
from grader.hosting.leaderboard.board import contamination_of
from grader.hosting.protocol.messages import BoardEntry
from grader.integrity.sketch_build import build_sketch
from grader.integrity.sketch_file import SUBMISSION_SKETCH, encode
from grader.submissions.archive import ArchiveLimits
from tests.hosting.support import REPO

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
TEXT = "a ledger of lighthouse keepers who logged the weather every night for forty years on a rocky northern island"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "submission"
    shutil.copytree(EXAMPLE, target)
    return target


def test_a_submission_without_a_sketch_carries_none_and_one_with_a_sketch_carries_it_read(folder: Path) -> None:
    assert check_submission(folder).training_sketch is None
    sketch = build_sketch([TEXT])
    (folder / SUBMISSION_SKETCH).write_bytes(encode(sketch))
    got = check_submission(folder).training_sketch
    assert got is not None and got.count == sketch.count and (got.rows == sketch.rows).all()


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda data: b"NOTASKCH" + data[8:], "training.sketch: magic: not a training sketch"),
        (lambda data: data[:-1], "training.sketch: count: says 1 signatures"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "training.sketch: sha256: the digest does not match"),
    ],
)
def test_a_malformed_sketch_refuses_the_submission_with_one_line(folder: Path, damage, words: str) -> None:  # type: ignore[no-untyped-def]
    (folder / SUBMISSION_SKETCH).write_bytes(damage(encode(build_sketch([TEXT]))))
    with pytest.raises(SubmissionError) as refused:
        check_submission(folder)
    assert str(refused.value).startswith(words) and "\n" not in str(refused.value)


def test_the_sketch_is_bounded_by_the_uploads_unpacked_bound_and_never_read_through_a_link(folder: Path, tmp_path: Path) -> None:
    data = encode(build_sketch([TEXT, TEXT + " and again with other words at the end of it all"]))
    (folder / SUBMISSION_SKETCH).write_bytes(data)
    total = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    assert check_submission(folder, limits=ArchiveLimits(max_total_bytes=total)).training_sketch is not None
    # a bound below the sketch's own size: refused by the reader, which reads no more than the bound (+1)
    with pytest.raises(SubmissionError, match="training.sketch: the training sketch is larger than"):
        check_submission(folder, limits=ArchiveLimits(max_total_bytes=len(data) - 1))
    (folder / SUBMISSION_SKETCH).unlink()
    (tmp_path / "elsewhere.sketch").write_bytes(data)
    os.symlink(tmp_path / "elsewhere.sketch", folder / SUBMISSION_SKETCH)
    with pytest.raises(SubmissionError):
        check_submission(folder)


def test_the_board_line_says_only_the_released_figure_and_a_row_without_a_sketch_says_nothing() -> None:
    released = {"task": "text2code", "split": "test", "test_queries": 881, "step": 10, "touched": 20, "share": 0.0227}
    withheld = {"task": "code2code", "split": "test", "test_queries": 1500, "step": 15, "touched": None, "share": None}
    line = contamination_of({"contamination": {"sketch_sha256": "0" * 64, "windows": 3, "tasks": [released, withheld]}})
    assert line == (
        "text2code (test): at least 20 of 881 test queries touched (2.3%; counts in steps of 10); "
        "code2code (test): fewer than 15 of 1500 test queries touched (withheld below 15)"
    )
    assert contamination_of({"tasks": {}}) is None
    row = {
        "rank": 1,
        "rank_interval": [1, 1],
        "group": 1,
        "participant": "p",
        "team": None,
        "baseline": False,
        "submission": "s",
        "name": "n",
        "kind": "onnx",
        "setting": "zero-shot",
        "training_data": None,
        "model": {},
        "final": False,
        "score": 0.5,
        "ladder": False,
        "interval": [0.4, 0.6],
        "tasks": {},
        "vs_above": None,
        "date": None,
        "report": None,
    }
    assert "contamination" not in BoardEntry(**row).model_dump()
    assert BoardEntry(**row, contamination=line).model_dump()["contamination"] == line


def test_the_scoring_process_audits_only_the_sketch_whose_digest_intake_recorded(tmp_path: Path) -> None:
    from grader.data.registry import resolve_benchmark
    from grader.grading.score_process import _contamination

    kept = tmp_path / "s.sketch"
    data = encode(build_sketch([TEXT]))
    kept.write_bytes(data)
    recorded = hashlib.sha256(data).hexdigest()
    block = _contamination(resolve_benchmark("mini"), ["text2code"], "test", kept, recorded)
    assert block["sketch_sha256"] == recorded and [t["touched"] for t in block["tasks"]] == [None]  # type: ignore[index]
    kept.write_bytes(encode(build_sketch([TEXT + " and a few more words written after intake"])))  # replaced on disk since
    with pytest.raises(InternalError, match="is not the one the upload carried"):
        _contamination(resolve_benchmark("mini"), ["text2code"], "test", kept, recorded)
