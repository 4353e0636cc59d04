"""Failure codes are one type: the enum, the report schema, ``grader check``'s hints and the docs list the same codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from grader.check.checker import FAILURE_HINTS
from grader.errors import TaskFailure
from grader.failures import EMITTED_CODES, FailureCode, code_or_infra

REPO = Path(__file__).resolve().parent.parent
ALL = {code.value for code in FailureCode}
EMITTED = {code.value for code in EMITTED_CODES}
CODE = re.compile(r"`([A-Z][A-Z_]+)`")


def _codes_in(text: str) -> set[str]:
    return set(CODE.findall(text))


def test_the_enum_keeps_every_code_an_old_report_may_carry() -> None:
    assert ALL == {
        "TIMEOUT",
        "OOM",
        "NONZERO_EXIT",
        "OUTPUT_MISSING",
        "OUTPUT_INVALID",
        "OUTPUT_TOO_LARGE",
        "IMAGE_INVALID",
        "INFRA",
        "MODEL_ERROR",
        "INPUT_INVALID",
        "NONDETERMINISTIC",
    }
    assert EMITTED == ALL - {"INPUT_INVALID"}
    assert not FailureCode.NONDETERMINISTIC.charged  # a worker that lied once causes it as well as the model
    assert FailureCode.OOM == "OOM" and json.dumps({"code": FailureCode.OOM}) == '{"code": "OOM"}'  # compares and serialises as its spelling


def test_the_report_schema_lists_the_same_codes() -> None:
    schema = json.loads((REPO / "grader" / "schemas" / "report.schema.json").read_text(encoding="utf-8"))
    assert set(schema["$defs"]["failure_code"]["enum"]) == ALL


def test_check_has_a_hint_for_every_code() -> None:
    assert set(FAILURE_HINTS) == set(FailureCode)


def test_task_failures_take_only_known_codes() -> None:
    for code in FailureCode:
        assert TaskFailure(code.value, "x").code is code


def test_the_docs_list_the_same_codes() -> None:
    protocol = (REPO / "docs" / "protocol.md").read_text(encoding="utf-8")
    table = {match for match in re.findall(r"^\| `([A-Z_]+)` \|", protocol, flags=re.MULTILINE)}
    assert table == EMITTED, "docs/protocol.md's failure-code table"
    reports = (REPO / "docs" / "reports.md").read_text(encoding="utf-8")
    row = next(line for line in reports.splitlines() if line.startswith("| `tasks.*.failure` |"))
    assert _codes_in(row) == ALL, "docs/reports.md's tasks.*.failure row"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"failed task carries one code \(([^)]*)\)", readme, flags=re.DOTALL)
    assert listed is not None
    assert _codes_in(listed.group(1)) == EMITTED, "README's failure-code list"


def test_a_code_read_back_is_a_failure_code_or_infra() -> None:
    assert all(code_or_infra(code.value) is code for code in FailureCode)
    for other in ("BOGUS", "", "infra", " TIMEOUT", None, 3, ["OOM"]):
        assert code_or_infra(other) is FailureCode.INFRA, other
