"""`grader --help` lists every exit status the table maps to, as README.md does; the upload progress on and off a terminal."""

from __future__ import annotations

import io
import re
from pathlib import Path

from click.testing import CliRunner

from grader.cli.exits import EXIT_MEANINGS, EXIT_STATUSES, REMOTE_STATE_EXIT
from grader.cli.main import cli
from grader.cli.submit_cmd import UploadProgress

REPO = Path(__file__).resolve().parent.parent


def test_help_lists_every_status_and_readme_documents_each() -> None:
    listed = {status for status, _ in EXIT_MEANINGS}
    assert {status for _, status in EXIT_STATUSES} | set(REMOTE_STATE_EXIT.values()) | {0} <= listed
    assert {5, 6, 75, 128} <= listed
    text = CliRunner().invoke(cli, ["--help"]).stdout
    for status, meaning in EXIT_MEANINGS:
        label = "128+N" if status == 128 else str(status)
        assert re.search(rf"^\s+{re.escape(label)}\s+{re.escape(meaning)}$", text, re.MULTILINE), (label, text)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for status, _ in EXIT_MEANINGS:
        label = "128+N" if status == 128 else str(status)
        assert f"\n| {label} | " in readme, label


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_off_a_terminal_the_upload_progress_is_a_few_plain_lines() -> None:
    stream = _Stream(tty=False)
    progress = UploadProgress(stream)
    total = 100 << 20
    for sent in range(1 << 20, total + 1, 1 << 20):
        progress(sent, total)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert lines == [
        "upload: 1.0/104.9 MB (0 %)",
        "upload: 26.2/104.9 MB (25 %)",
        "upload: 52.4/104.9 MB (50 %)",
        "upload: 78.6/104.9 MB (75 %)",
        "upload: 104.9/104.9 MB (100 %)",
    ]


def test_on_a_terminal_the_upload_progress_redraws_one_bar() -> None:
    stream = _Stream(tty=True)
    progress = UploadProgress(stream)
    progress(1, 2)
    progress(2, 2)
    assert stream.getvalue() == ("\rupload [###############...............] 0.0/0.0 MB\rupload [##############################] 0.0/0.0 MB\n")
