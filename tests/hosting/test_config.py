"""The competition file: the example works; every error names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.hosting.config import load_competition
from grader.hosting.errors import CompetitionFileError

REPO = Path(__file__).resolve().parents[2]
BASE = 'name = "c"\nbenchmark = "mini"\nstart = 2026-01-01T00:00:00Z\nend = 2027-01-01T00:00:00Z\n'


def test_example_competition_loads() -> None:
    competition = load_competition(REPO / "competitions_example" / "mini.toml")
    assert competition.benchmark_target() == "mini"
    assert competition.quotas.per_day == 5 and competition.quotas.sample_per_day == 20
    assert competition.limits.memory_bytes == 4 << 30 and competition.upload_max_bytes == 512 << 20
    assert competition.start.tzinfo is not None and competition.end > competition.start
    assert competition.registration == "closed" and competition.rules is None  # sign-up off unless the file opens it
    assert competition.teams is None and competition.merge_deadline() == competition.end  # no teams unless [teams]


@pytest.mark.parametrize(
    ("text", "key", "what"),
    [
        (BASE + "[quotas]\nper_day = -1\n", "quotas.per_day", "minimum"),
        (BASE + '[limits]\nmemory = "lots"\n', "limits.memory", "does not match"),
        (BASE + "surprise = 1\n", "surprise", "unknown key"),
        ('name = "c"\nstart = 2026-01-01T00:00:00Z\nend = 2027-01-01T00:00:00Z\n', "benchmark", "required"),
        ('name = "c"\nbenchmark = "mini"\nstart = 2026-01-01T00:00:00\nend = 2027-01-01T00:00:00Z\n', "start", "no UTC offset"),
        ('name = "c"\nbenchmark = "mini"\nstart = 2026-01-01T00:00:00Z\nend = 2025-01-01T00:00:00Z\n', "end", "after start"),
        (BASE + 'kinds = ["wasm"]\n', "kinds.0", "is not one of"),
        (BASE + "[queue]\nlease_s = 5\nheartbeat_s = 10\n", "queue.heartbeat_s", "shorter"),
        (BASE + "[sharding]\nshard_documents = 0\n", "sharding.shard_documents", "minimum"),
        (BASE + '[limits]\noutput = "big"\n', "limits.output", "does not match"),
        (BASE + '[retention]\nruns = "best"\n', "retention.runs", "is not one of"),
        (BASE + 'registration = "maybe"\n', "registration", "is not one of"),
        (BASE + 'registration = "open"\n', "registration", "rules text"),
        (BASE + "[teams]\nmax_size = 1\n", "teams.max_size", "minimum"),
        (BASE + "[teams]\nmerge_deadline = 2099-01-01T00:00:00Z\n", "teams.merge_deadline", "no later than end"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, key: str, what: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CompetitionFileError) as caught:
        load_competition(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: "), message
    assert what in message


def test_output_cap_and_sharding_are_competition_settings(tmp_path: Path) -> None:
    """The sandbox output cap (per sandboxed run: a task, or one shard of it) and the shard plan come from the file."""
    path = tmp_path / "c.toml"
    path.write_text(
        BASE + '[limits]\noutput = "3g"\n[sharding]\nshard_documents = 50000\nsearch_memory = "64m"\ndeadline_s = 600\n', encoding="utf-8"
    )
    competition = load_competition(path)
    assert competition.limits.output_bytes == 3 << 30 and competition.limits.as_report()["output_bytes"] == 3 << 30
    assert competition.sharding.shard_documents == 50_000 and competition.sharding.search_memory == 64 << 20
    assert competition.sharding.deadline_s == 600
    path.write_text(BASE, encoding="utf-8")
    defaults = load_competition(path)
    assert defaults.limits.output_bytes == 2 << 30 and defaults.sharding.shard_documents is None
    assert defaults.sharding.deadline_s == 86_400  # a day


def test_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("name = \n", encoding="utf-8")
    with pytest.raises(CompetitionFileError, match="not valid TOML"):
        load_competition(path)


def test_admin_refuses_a_state_folder_without_a_competition(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from grader.cli.main import cli

    result = CliRunner().invoke(cli, ["admin", "--state", str(tmp_path / "typo"), "add-participant", "x"])
    assert result.exit_code == 2 and "no competition database here" in result.output
    assert not (tmp_path / "typo" / "grader.sqlite3").exists()


def test_host_key_is_0600_and_can_be_encrypted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    from grader.errors import KeyFileError
    from grader.hosting.keyring.host_key import PASSPHRASE_ENV, ensure_host_key

    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse")
    key = ensure_host_key(tmp_path)
    private = tmp_path / "grader.key"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and b"ENCRYPTED" in private.read_bytes()
    assert ensure_host_key(tmp_path).public_key().public_bytes_raw() == key.public_key().public_bytes_raw()
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(KeyFileError, match="wrong GRADER_HOST_KEY_PASSPHRASE"):
        ensure_host_key(tmp_path)
    monkeypatch.delenv(PASSPHRASE_ENV)
    with pytest.raises(KeyFileError, match="encryption does not match"):
        ensure_host_key(tmp_path)
    private.chmod(0o644)
    with pytest.raises(KeyFileError, match="readable by others"):
        ensure_host_key(tmp_path)


def test_the_log_key_is_encrypted_like_the_host_key_and_named_in_its_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    from grader.errors import KeyFileError
    from grader.hosting.keyring.host_key import PASSPHRASE_ENV
    from grader.hosting.keyring.log_key import ensure_log_key

    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse")
    signer = ensure_log_key(tmp_path, "grader-log/c")
    private = tmp_path / "log.key"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and b"ENCRYPTED" in private.read_bytes()
    assert ensure_log_key(tmp_path, "grader-log/c").verifier.vkey == signer.verifier.vkey
    monkeypatch.setenv(PASSPHRASE_ENV, "wrong")
    with pytest.raises(KeyFileError, match=r"cannot read the log key \(wrong GRADER_HOST_KEY_PASSPHRASE") as wrong:
        ensure_log_key(tmp_path, "grader-log/c")
    assert "host key" not in str(wrong.value)
    monkeypatch.delenv(PASSPHRASE_ENV)
    with pytest.raises(KeyFileError, match="the log key's encryption does not match"):
        ensure_log_key(tmp_path, "grader-log/c")


def test_retention_of_runs_is_a_competition_setting(tmp_path: Path) -> None:
    """``[retention] runs``: every run (the default) or, after the end, the finals' and each board's best (docs/hosting.md#retention)."""
    path = tmp_path / "c.toml"
    path.write_text(BASE, encoding="utf-8")
    assert load_competition(path).retention.runs == "all"
    path.write_text(BASE + '[retention]\nruns = "finals-and-best"\n', encoding="utf-8")
    assert load_competition(path).retention.runs == "finals-and-best"


def test_the_keys_a_first_start_makes_are_the_files_key_files_names(tmp_path: Path) -> None:
    from grader.hosting.keyring.blinding_key import ensure_competition_blinding_key
    from grader.hosting.keyring.files import key_files
    from grader.hosting.keyring.host_key import ensure_host_key
    from grader.hosting.keyring.log_key import ensure_log_key
    from grader.hosting.keyring.partition_secret import ensure_partition_secret
    from grader.hosting.keyring.session_secret import ensure_session_secret

    files = key_files(tmp_path)
    files.folder.mkdir()
    ensure_host_key(files.folder)
    ensure_log_key(files.folder, "grader-log/c")
    ensure_partition_secret(files.folder)
    ensure_session_secret(files.folder)
    ensure_competition_blinding_key(files.folder)
    named = {getattr(files, name) for name, value in vars(type(files)).items() if isinstance(value, property)}
    assert set(files.folder.iterdir()) == named and len(named) == 7
    assert files.folder == tmp_path / "keys"
