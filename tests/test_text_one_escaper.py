"""Control characters are escaped in one place, :func:`grader.text.escape_control`."""

from __future__ import annotations

import re
from pathlib import Path

from grader.text import escape_control, escape_lines

GRADER = Path(__file__).resolve().parent.parent / "grader"


def test_escape_control_writes_what_ascii_writes_for_every_unprintable_character() -> None:
    for point in [*range(0x3000), 0x200E, 0x202E, 0x2066, 0xD800, 0xDFFF, 0xFEFF, 0xE000, 0x1F600, 0xE0001, 0x10FFFF]:
        char = chr(point)
        assert escape_control(char) == (char if char.isprintable() else ascii(char)[1:-1]), hex(point)


def test_escape_control_takes_any_value_and_keeps_one_line() -> None:
    assert escape_control(12) == "12"
    assert escape_control("a\x1b[2Jb\nc\u202e") == "a\\x1b[2Jb\\nc\\u202e"


def test_no_module_keeps_its_own_copy_of_the_escaping() -> None:
    copy = re.compile(r"isprintable\(\)\s+else")
    copies = [
        str(path.relative_to(GRADER)) for path in GRADER.rglob("*.py") if path.name != "text.py" and copy.search(path.read_text(encoding="utf-8"))
    ]
    assert copies == []


def test_escape_lines_keeps_each_line_and_escapes_within_it() -> None:
    text = "one \x1b]52;c;eA==\x07\ntwo \x9b2J\r\n\nthree \x1b]8;;http://x\x1b\\y"
    shown = escape_lines(text)
    assert shown.split("\n") == [escape_control(line) for line in text.split("\n")]
    assert shown == "one \\x1b]52;c;eA==\\x07\ntwo \\x9b2J\\r\n\nthree \\x1b]8;;http://x\\x1b\\y"
    assert escape_lines(b"bytes") == "b'bytes'"  # anything str() takes, as escape_control
