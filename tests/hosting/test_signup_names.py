"""Names a person may sign up under (grader/hosting/identity/names.py): confusable skeletons, reserved names, controls."""

from __future__ import annotations

import pytest

from grader.hosting.errors import HostingError
from grader.hosting.identity.names import check_new_name, confusable

#: Pairs UTS #39 calls confusable (its examples and confusables.txt's mappings), and two this module adds on purpose.
CONFUSABLE = [
    ("paypal", "p\u0430yp\u0430l"),  # Cyrillic a
    ("scope", "\u0455\u0441\u043e\u0440\u0435"),  # all Cyrillic
    ("rn", "m"),  # a prototype sequence
    ("l", "1"),
    ("l", "I"),
    ("0", "O"),
    ("R00T", "root"),  # 0 is a homoglyph of O, not of o: they meet in upper case
    ("\U0001d400lice", "Alice"),  # mathematical bold A
    ("\ufb01le", "file"),  # a ligature
    ("Alice", "alice"),  # case: added here
    ("\u00e1dmin", "admin"),  # combining marks: added here
    ("Bob Smith", "bobsmith"),  # spaces: added here
]
DISTINCT = [("bob", "rob"), ("alice", "alice2"), ("carol", "karol"), ("\u4e2d\u6587", "\u4e2d\u6587\u6587")]


@pytest.mark.parametrize(("one", "other"), CONFUSABLE)
def test_confusable_names_share_a_skeleton(one: str, other: str) -> None:
    assert confusable(one, other)


@pytest.mark.parametrize(("one", "other"), DISTINCT)
def test_distinct_names_keep_distinct_skeletons(one: str, other: str) -> None:
    assert not confusable(one, other)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("", "1-100 characters"),
        (" alice", "without spaces around it"),
        ("a" * 101, "1-100 characters"),
        ("ali\u202ece", "no control, bidi or zero-width"),
        ("ali\u200bce", "no control, bidi or zero-width"),
        ("ali\x1b[2Jce", "no control, bidi or zero-width"),
        ("\u0410dmin", "reserved"),
        ("R00T", "reserved"),
        ("worker-7", "reserved"),
        ("AIice", "too like one taken"),
    ],
)
def test_refused_names_say_why_in_one_line(name: str, words: str) -> None:
    with pytest.raises(HostingError, match=words) as refused:
        check_new_name(name, ["alice"])
    assert "\n" not in str(refused.value) and "\x1b" not in str(refused.value)


def test_a_name_unlike_any_taken_is_accepted() -> None:
    check_new_name("Zoë Quill", ["alice", "bob"])
