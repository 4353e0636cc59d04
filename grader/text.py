"""Untrusted text made inert and bounded before it reaches a terminal, a log or a report.

A submission controls its container's stderr, the ids in its runs and the names
in its manifest. Any of it may hold terminal escape sequences (clear the screen,
draw a fake line, retitle the window, add a hyperlink), bidi overrides, or be
100 MB long. Everything quoted back is therefore escaped (every character that
``str.isprintable`` refuses: C0/C1 controls, ESC, DEL, format and separator
characters, lone surrogates) and cut to a fixed length, so a signed report stays
a few kilobytes and ``grader verify`` always accepts its size.
"""

from __future__ import annotations

import re

#: Longest id (query, document, image reference...) quoted in a message, in characters.
MAX_QUOTED_ID = 64
#: Longest message (failure message, error line) kept, in characters, after escaping.
MAX_MESSAGE = 1000
#: Longest line of a container's stderr quoted back.
MAX_STDERR_LINE = 300
#: Longest error line the CLI prints (a message, a location and quoted ids).
MAX_ERROR_LINE = 2000

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    point = ord(char)
    if point <= 0xFF:
        return f"\\x{point:02x}"
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def escape_control(value: object) -> str:
    """``value`` (a string, or anything ``str()`` turns into one) with every non-printable character written
    as a visible escape (``\\x1b``, ``\\n``...): the escape ``ascii()`` writes for it, one line, inert on a terminal."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape_char(char) for char in text)


def escape_lines(value: object) -> str:
    """``value`` for a terminal, several lines: each line escaped as :func:`escape_control` does, newlines kept.

    For text a server or a container wrote (container logs, a signed note): a carriage return, ESC,
    a C1 control (``\\x9b`` opens a CSI as ``ESC [`` does), BEL (which ends an OSC 52 clipboard write
    or an OSC 8 link) all show as visible escapes, so nothing moves the cursor, clears the screen,
    writes the clipboard or adds a link. ``click.unstyle`` is not enough: it strips colours only.
    """
    text = value if isinstance(value, str) else str(value)
    return "\n".join(escape_control(line) for line in text.split("\n"))


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters plus a note of how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """Escaped and truncated: safe for a terminal, a log line or a report field."""
    # Escape only what can be shown (escaping may multiply the length by ten), then cut again.
    head = escape_control(text[: limit + 1])
    if len(head) > limit or len(text) > limit:
        shown = head[:limit]
        return f"{shown}... ({len(text)} characters in all)"
    return head


def quote_id(value: object, limit: int = MAX_QUOTED_ID) -> str:
    """An untrusted id quoted for a message: ``repr``-escaped (one line, no controls) and at most ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text)} characters)"
    return repr(text)


# A quoted literal as repr() and json.dumps write them (quotes inside are escaped).
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


def redact_quoted(message: str) -> str:
    """``message`` with every quoted literal replaced by ``'...'``.

    Used for reports of hidden splits: the grader's own words stay, the ids and
    text a container returned (which could carry hidden queries or corpus text out
    of the sandbox) do not.
    """
    return _QUOTED.sub("'...'", message)


def first_unprintable(text: str) -> str | None:
    """The first character of ``text`` that :func:`escape_control` would escape, written ``U+XXXX``; None if there is none.

    Names and labels a participant writes are shown on terminals and pages: intake refuses
    them when they hold a control (C0, C1, DEL), bidi (U+202E), zero-width or other
    format or separator character, naming the first one.
    """
    if text.isprintable():
        return None
    char = next(c for c in text if not c.isprintable())
    return f"U+{ord(char):04X}"
