"""``grader effect`` reads each run folder's report through ``Report.from_json``: one that breaks the schema is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.effect.inputs import RunFolder
from grader.errors import InputError


@pytest.mark.parametrize(
    ("report", "pointer"),
    [
        ({"schema_version": "1", "tasks": {"toy": {"status": "scored"}}}, "/"),
        ([], "/"),
    ],
)
def test_a_report_that_breaks_the_schema_is_refused_naming_the_file(tmp_path: Path, report: object, pointer: str) -> None:
    (tmp_path / "report.json").write_text(json.dumps(report), encoding="utf-8")
    with pytest.raises(InputError, match=rf"report\.json: invalid report at {pointer}") as raised:
        RunFolder.load(tmp_path, "base")
    assert raised.value.path == str(tmp_path / "report.json")
