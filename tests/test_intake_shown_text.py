"""Intake refuses what would render as control on a terminal or page, and bounds what it used to leave unbounded.

Names, teams, training datasets and model-card text with control, bidi (U+202E), zero-width
or C1 characters used to be accepted and printed raw by `grader admin submissions` and `list`;
`training.datasets` had no bound (11,000 labels made the board page 985 KB); a tar member
2,000 folders deep ended in RecursionError (a 500 on the server). Each is now one clear
refusal at intake, and the host's listings escape what older rows may still hold.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.errors import SubmissionError
from grader.hosting.errors import HostingError
from grader.submissions.archive import MAX_MEMBER_DEPTH, open_submission
from grader.submissions.manifest import MAX_DATASET_CHARS, MAX_DATASETS, load_manifest
from grader.text import first_unprintable

HOSTILE = {
    "bidi override": "good\u202edoog",
    "zero-width space": "a\u200bb",
    "zero-width joiner": "a\u200db",
    "C1 CSI": "a\x9b31mred",
    "escape": "a\x1b[2Jb",
    "newline": "line\nfake line",
    "BOM": "\ufeffname",
    "line separator": "a\u2028b",
}


def docker_manifest(folder: Path, **fields: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"kind": "docker", "name": "ok", "mode": "retrieve", "image": "image.tar", "training": {"setting": "zero-shot", "datasets": []}}
    data.update(fields)
    (folder / "submission.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_names_datasets_and_model_card_text_with_controls_are_refused(tmp_path: Path, text: str) -> None:
    code = first_unprintable(text)
    assert code is not None
    cases = {
        "/name": {"name": text},
        "/training/datasets/1": {"training": {"setting": "fine-tuned", "datasets": ["csn", text]}},
        "/model_card/base_model": {"manifest_version": 2, "model_card": {"base_model": text}},
    }
    for pointer, fields in cases.items():
        with pytest.raises(SubmissionError) as caught:
            load_manifest(docker_manifest(tmp_path / pointer.replace("/", "_"), **fields))
        assert caught.value.field == pointer
        assert caught.value.what.startswith(f"holds the non-printable character {code} ")
        assert text not in str(caught.value)  # the message itself quotes nothing raw


def test_plain_unicode_names_are_accepted(tmp_path: Path) -> None:
    name = "Modèle 検索 — v2 (α)"
    assert load_manifest(docker_manifest(tmp_path, name=name, training={"setting": "fine-tuned", "datasets": ["CodeSearchNet ñ"]})).name == name


def test_training_datasets_are_bounded_in_count_and_length(tmp_path: Path) -> None:
    many = [f"set-{n}" for n in range(11_000)]
    with pytest.raises(SubmissionError) as caught:
        load_manifest(docker_manifest(tmp_path / "many", training={"setting": "fine-tuned", "datasets": many}))
    assert caught.value.field == "/training/datasets"
    long = "x" * (MAX_DATASET_CHARS + 1)
    with pytest.raises(SubmissionError) as caught:
        load_manifest(docker_manifest(tmp_path / "long", training={"setting": "fine-tuned", "datasets": [long]}))
    assert caught.value.field == "/training/datasets/0"
    most = [f"set-{n}" for n in range(MAX_DATASETS)]
    assert (
        len(load_manifest(docker_manifest(tmp_path / "most", training={"setting": "fine-tuned", "datasets": most})).training.datasets) == MAX_DATASETS
    )


def nested_archive(path: Path, depth: int) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("/".join(["d"] * depth) + "/submission.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    path.write_bytes(buffer.getvalue())
    return path


@pytest.mark.parametrize(
    ("depth", "words"), [(2000, "characters, over the limit of 1024"), (MAX_MEMBER_DEPTH + 1, "levels deep, over the limit of 32")]
)
def test_a_deeply_nested_member_is_refused_before_anything_is_unpacked(tmp_path: Path, depth: int, words: str) -> None:
    with pytest.raises(SubmissionError) as caught, open_submission(nested_archive(tmp_path / "deep.tar.gz", depth)):
        pass
    assert words in caught.value.what


def test_participant_and_team_names_with_controls_are_refused(tmp_path: Path) -> None:
    from grader.hosting.db.session import open_database
    from grader.hosting.identity.participants import create_participant

    db = open_database(tmp_path)
    with db.session() as session:
        for text in HOSTILE.values():
            with pytest.raises(HostingError):
                create_participant(session, text)
            with pytest.raises(HostingError):
                create_participant(session, "fine", text)
    db.dispose()


def test_admin_listings_escape_what_older_rows_hold(tmp_path: Path) -> None:
    """Rows written before intake refused controls (or straight into the database) reach the host's terminal escaped."""
    from grader.hosting.clock import utcnow
    from grader.hosting.db.models import Participant, Pin
    from grader.hosting.db.session import open_database
    from grader.hosting.intake.submission_rows import received_submission

    db = open_database(tmp_path)
    now = utcnow()
    with db.session() as session:
        pin = Pin(competition="c", grader_version="0", digests={}, active=True, pinned_at=now)
        session.add(pin)
        participant = Participant(name="eve\u202egnp.exe", team="t\x1b]0;pwned\x07", token_sha256="0" * 64, is_baseline=False, created_at=now)
        session.add(participant)
        session.flush()
        session.add(
            received_submission(
                submission_id="s" + "0" * 16,
                participant_id=participant.id,
                pin_id=pin.id,
                name="sub\x1b[2J\u200b",
                kind="docker",
                track="hidden",
                split="test",
                upload_path="x.tar.gz",
                upload_sha256="0" * 64,
                upload_bytes=1,
                content_digest="0" * 64,
                uploaded_at=now,
                attempt_limit=3,
                labels={},
            )
        )
    db.dispose()
    for command in ("list", "submissions"):
        result = CliRunner().invoke(cli, ["admin", "--state", str(tmp_path), command], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert all(line.isprintable() for line in result.output.splitlines()), repr(result.output)
        assert "\\u202e" in result.output
    listed = CliRunner().invoke(cli, ["admin", "--state", str(tmp_path), "submissions"]).output
    assert "sub\\x1b[2J\\u200b" in listed
