"""The JSON I/O module (grader/jsonio.py) and the text-safety helpers (grader/text.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import jsonio
from grader.data.textfiles import iter_jsonl
from grader.errors import DataError, TaskFailure
from grader.failures import FailureCode
from grader.grading.store import Loaded, TaskStore
from grader.reports.assemble import failed_task
from grader.reports.example import example_report
from grader.schemas import first_error
from grader.text import MAX_MESSAGE, MAX_STDERR_LINE, bounded, escape_control, quote_id, redact_quoted

DEEP = 200_000


# --------------------------------------------------------------------------- jsonio


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1, "a": 2}', "key 'a' appears twice in one object"),
        ('{"a": NaN}', "NaN is not a valid score"),
        ("[Infinity]", "Infinity is not a valid score"),
        ("[-Infinity]", "-Infinity is not a valid score"),
        ("[" * DEEP + "]" * DEEP, "nested too deeply"),
        ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
        ('{"a": ' * 70 + "1" + "}" * 70, "nested deeper than 64 levels"),
        ("1" * 5000, "invalid JSON"),  # more digits than Python converts to an int
        ("{", "invalid JSON: Expecting property name"),
    ],
)
def test_strict_loads_refuses(text: str, expected: str) -> None:
    with pytest.raises(jsonio.JsonError) as caught:
        jsonio.loads(text)
    assert expected in caught.value.what


def test_strict_loads_accepts_what_json_allows_within_bounds() -> None:
    assert jsonio.loads("[" * 64 + "]" * 64) is not None
    assert jsonio.loads(b'{"a": [1, 2.5, "x\\u001b", null, true]}') == {"a": [1, 2.5, "x\x1b", None, True]}
    with pytest.raises(jsonio.JsonError, match="larger than 4 bytes"):
        jsonio.loads("[1, 2]", max_bytes=4)
    with pytest.raises(jsonio.JsonError, match="not UTF-8"):
        jsonio.loads(b"[\xff]")


def test_jsonl_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a"}\n\n{"_id": "b", "_id": "c"}\n', encoding="utf-8")
    with pytest.raises(DataError) as caught:
        list(iter_jsonl(path))
    assert str(caught.value) == f"{path}:3: key '_id' appears twice in one object"
    path.write_text('{"_id": "a"}\n' + "[" * DEEP + "]" * DEEP + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: nested too deeply"):
        list(iter_jsonl(path))


def test_load_object_returns_the_object_or_raises_the_callers_error(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    path.write_text('{"queries": []}', encoding="utf-8")
    assert jsonio.load_object(path, DataError) == {"queries": []}
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(DataError, match=r"ids\.json: expected the ids$"):
        jsonio.load_object(path, DataError, expected="expected the ids")
    path.write_text('{"a": 1,\n "a": 2}', encoding="utf-8")
    with pytest.raises(DataError, match=r"appears twice"):
        jsonio.load_object(path, DataError)
    with pytest.raises(DataError, match=r"missing\.json: cannot read: No such file or directory$"):
        jsonio.load_object(tmp_path / "missing.json", DataError)
    path.write_text("[1, 2]", encoding="utf-8")
    assert jsonio.load_file_as(path, DataError) == [1, 2]  # any value: the caller's schema says what shape


def test_write_json_is_atomic(tmp_path: Path) -> None:
    target = tmp_path / "out" / "stats.json"
    jsonio.write_json(target, {"b": 1, "a": [1.5]}, sort_keys=True)
    assert target.read_text(encoding="utf-8") == '{\n  "a": [\n    1.5\n  ],\n  "b": 1\n}\n'
    with pytest.raises(ValueError):
        jsonio.write_json(target, {"a": float("nan")})
    assert json.loads(target.read_text(encoding="utf-8")) == {"a": [1.5], "b": 1}  # the old file, whole
    assert sorted(p.name for p in target.parent.iterdir()) == ["stats.json"]  # no temporary left behind


def test_write_json_sets_the_mode_and_can_write_ascii_only(tmp_path: Path) -> None:
    # A staged task.json is read by the container's user: 0644, and ASCII with \u escapes as the protocol writes it.
    target = tmp_path / "task.json"
    jsonio.write_json(target, {"task": "caf\u00e9\u202e"}, indent=None, ensure_ascii=True, mode=0o644)
    assert target.read_bytes() == b'{"task": "caf\\u00e9\\u202e"}\n'
    assert target.stat().st_mode & 0o777 == 0o644
    jsonio.write_json(target, {"task": "caf\u00e9"}, indent=None)
    assert target.read_bytes() == '{"task": "caf\u00e9"}\n'.encode()
    assert target.stat().st_mode & 0o777 == 0o600  # the temporary file's own mode when none is asked for


def test_the_task_store_reads_strictly_and_writes_atomically(tmp_path: Path) -> None:
    store = TaskStore(tmp_path)
    key = TaskStore.key(task="alpha", split="test")
    path = store.save("alpha", key, {"name": "alpha"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"key": key, "entry": {"name": "alpha"}}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary left behind
    assert store.lookup("alpha", key).rejected == "the entry breaks the report schema at /"
    # A second "key" before the real one: json.loads keeps the last and would read on; jsonio refuses the bytes.
    path.write_text(path.read_text(encoding="utf-8").replace('"entry"', '"key": {}, "entry"', 1), encoding="utf-8")
    assert json.loads(path.read_text(encoding="utf-8"))["key"] == key
    assert store.lookup("alpha", key) == Loaded(None, "not valid JSON")


# --------------------------------------------------------------------------- text safety


def test_escape_control_makes_terminal_sequences_inert() -> None:
    line = "\x1b[2J\x1b]0;title\x07\x9b\u202eok\n\tend\x7f"
    escaped = escape_control(line)
    assert escaped == "\\x1b[2J\\x1b]0;title\\x07\\x9b\\u202eok\\n\\tend\\x7f"
    assert escaped.isprintable()
    assert escape_control("café 東京 ok") == "café 東京 ok"


def test_bounded_and_quoted_text_have_a_fixed_size() -> None:
    huge = "\x1b" * 10_000_000
    shown = bounded(huge)
    assert len(shown) < MAX_MESSAGE + 60 and shown.isprintable()
    assert shown.endswith("(10000000 characters in all)")
    quoted = quote_id("A" * 100_000_000)
    assert quoted == repr("A" * 64) + "... (100000000 characters)"
    assert redact_quoted("query_id: 'secret text' is not one of the staged queries") == "query_id: '...' is not one of the staged queries"
    assert redact_quoted('document "a\\"b" twice') == "document '...' twice"


def test_task_failures_are_bounded_and_keep_the_container_words_apart() -> None:
    failure = TaskFailure("NONZERO_EXIT", "exit status 1", container_words="\x1b[2J" + "x" * 5000)
    assert failure.code is FailureCode.NONZERO_EXIT and failure.code == "NONZERO_EXIT"
    assert failure.own_message == "exit status 1"
    assert failure.container_words is not None and failure.container_words.startswith("\\x1b[2J") and len(failure.container_words) < 400
    assert failure.report_text(public=False) == ("exit status 1", None)
    assert failure.report_text(public=True) == ("exit status 1", failure.container_words)
    quoting = TaskFailure("OUTPUT_INVALID", "/output/run.jsonl: query_id: 'hidden query text' is not one of the staged queries")
    assert quoting.report_text(public=False) == ("/output/run.jsonl: query_id: '...' is not one of the staged queries", None)
    with pytest.raises(ValueError):
        TaskFailure("NOT_A_CODE", "x")


def test_a_failed_entry_is_small_whatever_the_message() -> None:
    entry = failed_task("t", split="test", data_digest="0" * 64, code="OUTPUT_INVALID", message="q" * 100_000_000, judged=3, stderr="\x1b" * 10_000)
    assert len(json.dumps(entry)) < 3000
    assert "\x1b" not in entry["failure"]["stderr"]


def test_the_schema_bounds_the_stderr_field_at_least_as_wide_as_the_text_bound() -> None:
    entry = failed_task("t", split="dev", data_digest="0" * 64, code="NONZERO_EXIT", message="exit status 1", judged=1, stderr="\x1b" * 1_000_000)
    shown = entry["failure"]["stderr"]
    assert MAX_STDERR_LINE < len(shown) <= 400
    report = example_report()
    report["tasks"]["t"] = {key: value for key, value in entry.items() if key != "name"}
    assert first_error("report", report) is None
