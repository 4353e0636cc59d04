"""CLI tests of ``grader keygen`` and ``grader verify`` through click's CliRunner."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from click.testing import CliRunner

from grader.cli.main import cli
from grader.reports.dsse import envelope_json
from grader.reports.example import example_report
from grader.reports.signing import write_signed_report


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture()
def keys(tmp_path, runner):
    result = runner.invoke(cli, ["keygen", "--out", str(tmp_path / "keys")])
    assert result.exit_code == 0, result.output
    return tmp_path / "keys" / "grader.key", tmp_path / "keys" / "grader.pub"


@pytest.fixture()
def signed(tmp_path, keys):
    """(report dict, envelope path, plain report path) signed with the keygen key."""
    report = example_report(failed_task=True)
    envelope_path, plain_path = write_signed_report(report, keys[0], tmp_path / "out" / "report.dsse.json")
    return report, envelope_path, plain_path


def _assert_one_line_failure(result, path, phrase: str) -> str:
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}: ")
    assert phrase in lines[0], lines[0]
    return lines[0]


def test_keygen_writes_keys_and_refuses_to_overwrite(tmp_path, runner):
    out = tmp_path / "keys"
    result = runner.invoke(cli, ["keygen", "--out", str(out)])
    assert result.exit_code == 0, result.output
    private, public = out / "grader.key", out / "grader.pub"
    if os.name == "posix":
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert "keyid: " in result.stdout
    before = (private.read_bytes(), public.read_bytes())
    # The private key's contents are never printed.
    assert private.read_bytes().decode().splitlines()[1] not in result.output

    again = runner.invoke(cli, ["keygen", "--out", str(out)])
    assert again.exit_code != 0
    assert again.stdout == ""
    assert "already exists" in again.stderr and len(again.stderr.splitlines()) == 1
    assert (private.read_bytes(), public.read_bytes()) == before

    # Only the public key exists: nothing is written either.
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "grader.pub").write_bytes(public.read_bytes())
    third = runner.invoke(cli, ["keygen", "--out", str(lone)])
    assert third.exit_code != 0
    assert sorted(p.name for p in lone.iterdir()) == ["grader.pub"]


def test_verify_prints_a_verified_summary(runner, keys, signed):
    report, envelope_path, _ = signed
    result = runner.invoke(cli, ["verify", str(envelope_path), "--key", str(keys[1])])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert out.startswith("verified: ")
    subject = report["subject"]
    assert subject["name"] in out and subject["digest"]["sha256"] in out
    assert report["benchmark"]["name"] in out
    assert f"policy: {report['policy']}" in out
    measure = report["aggregate"]["measure"]
    assert f"score: {measure} = n/a" in out  # a task failed, so there is no score
    task_lines = [line for line in out.splitlines() if line.startswith("task ")]
    assert len(task_lines) == len(report["tasks"])
    for name, task in report["tasks"].items():
        (line,) = [line for line in task_lines if line.split()[1] == name]
        assert task["status"] in line
        if task["status"] == "scored":
            assert f"{measure} = {task['measures'][measure]!r}" in line
        else:
            assert task["failure"]["code"] in line


def test_verify_summary_shows_the_full_precision_score(tmp_path, runner, keys):
    report = example_report()
    envelope_path, _ = write_signed_report(report, keys[0], tmp_path / "ok" / "signed.json")
    result = runner.invoke(cli, ["verify", str(envelope_path), "--key", str(keys[1])])
    assert result.exit_code == 0
    assert f"score: {report['aggregate']['measure']} = {report['aggregate']['score']!r}\n" in result.stdout


def test_verify_json_prints_the_verified_report(runner, keys, signed):
    report, envelope_path, plain_path = signed
    result = runner.invoke(cli, ["verify", str(envelope_path), "--key", str(keys[1]), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == report
    assert result.stdout.encode() == plain_path.read_bytes()


def _edit_envelope(path, edit) -> None:
    envelope = json.loads(path.read_bytes())
    edit(envelope)
    path.write_bytes(envelope_json(envelope))


def _flip_signature(envelope: dict) -> None:
    signature = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    signature[0] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(signature)).decode()


@pytest.mark.parametrize("as_json", [False, True])
def test_verify_failures_exit_1_with_one_line_and_no_stdout(tmp_path, runner, keys, signed, as_json):
    _, envelope_path, _ = signed
    extra = ["--json"] if as_json else []

    def run(path, key=keys[1]):
        return runner.invoke(cli, ["verify", str(path), "--key", str(key), *extra])

    missing = tmp_path / "missing.dsse.json"
    _assert_one_line_failure(run(missing), missing, "unreadable file")
    _assert_one_line_failure(run(tmp_path), tmp_path, "unreadable file")

    not_json = tmp_path / "not.json"
    not_json.write_text("{]")
    _assert_one_line_failure(run(not_json), not_json, "not valid JSON")

    other = runner.invoke(cli, ["keygen", "--out", str(tmp_path / "other")])
    assert other.exit_code == 0
    wrong_key = run(envelope_path, tmp_path / "other" / "grader.pub")
    line = _assert_one_line_failure(wrong_key, envelope_path, "key mismatch")
    assert "envelope keyid" in line

    _edit_envelope(envelope_path, _flip_signature)
    _assert_one_line_failure(run(envelope_path), envelope_path, "bad signature")

    _edit_envelope(envelope_path, lambda e: e.update(payloadType="application/json"))
    _assert_one_line_failure(run(envelope_path), envelope_path, "wrong payload type 'application/json'")


def test_verify_with_a_bad_public_key_file_is_an_error(tmp_path, runner, keys, signed):
    _, envelope_path, _ = signed
    result = runner.invoke(cli, ["verify", str(envelope_path), "--key", str(keys[0])])
    assert result.exit_code != 0 and result.stdout == ""
    assert "is a private key" in result.stderr
    key_text = keys[0].read_text().splitlines()[1]
    assert key_text not in result.stderr
