"""Validation of query and document identifiers, shared by every reader."""

from __future__ import annotations

#: The characters no identifier may hold (the run rules and every reader refuse them).
FORBIDDEN_ID_CHARACTERS = frozenset("\x00\t\n\r")


def id_problem(value: object) -> str | None:
    """Return why ``value`` is not a usable identifier, or ``None`` if it is.

    Identifiers are non-empty strings without NUL, tab or line breaks: those would
    make TSV and TREC files ambiguous, and NUL would break byte-wise ordering.
    """
    if not isinstance(value, str):
        return f"expected a string identifier, got {type(value).__name__}"
    if not value:
        return "identifier must not be empty"
    if not FORBIDDEN_ID_CHARACTERS.isdisjoint(value):
        return "identifier must not contain NUL, tab or line breaks"
    return None
