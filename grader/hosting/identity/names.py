"""Names a person may sign up under: printable, not reserved, not confusable with a name already held.

Two names are confusable when their *skeletons* are equal: UTS #39's skeleton (NFD, each character replaced by the
prototype of its confusable class, NFD again), computed here from the confusables data that the maintained
``confusable_homoglyphs`` package ships (Unicode's confusables.txt, as pairs of homoglyphs), under NFKC and case folding and without
combining marks or spaces, so that ``Alice``, ``alice``, ``\\u0430lice`` (a Cyrillic a), ``AIice`` (capital i) and ``Álice`` are
one name: stricter than UTS #39, on purpose (a name is read by people, not compared by machines). The package's data holds
each single-character pair both ways; a single character whose homoglyph is a sequence (``m`` and ``rn``) is
confusables.txt's mapping of a source to a prototype sequence and is expanded.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
from collections.abc import Iterable

from grader.hosting.errors import HostingError
from grader.text import first_unprintable, quote_id

MAX_NAME = 100
#: Names no one signs up under: the server's own words, and names that read as the host's or a worker's.
RESERVED = frozenset(
    {
        "admin",
        "administrator",
        "host",
        "root",
        "system",
        "server",
        "grader",
        "worker",
        "local",
        "baseline",
        "moderator",
        "staff",
        "support",
        "anonymous",
        "nobody",
    }
)
#: Direction marks the package's data wraps some right-to-left characters in; not part of any character.
_MARKS = str.maketrans("", "", "\u200e\u200f")


@functools.cache
def _classes() -> tuple[dict[str, str], dict[str, str]]:
    """Each character's class prototype (the smallest code point of its single-character homoglyphs, found by
    union-find) and each character's expansion (a homoglyph that is a sequence). Built once, on first use."""
    from confusable_homoglyphs.confusables import confusables_data  # 1 MB of data: loaded when a name is checked

    parent: dict[str, str] = {}

    def find(char: str) -> str:
        root = char
        while parent.get(root, root) != root:
            root = parent[root]
        parent[char] = root
        return root

    expansions: dict[str, str] = {}
    for key, homoglyphs in confusables_data.items():
        source = key.translate(_MARKS)
        if len(source) != 1:
            continue
        for homoglyph in homoglyphs:
            target = str(homoglyph["c"]).translate(_MARKS)
            if len(target) == 1:
                a, b = find(source), find(target)
                if a != b:
                    parent[max(a, b)] = min(a, b)  # the smaller code point is the class's prototype
            elif target and source not in expansions:
                expansions[source] = target
    return {char: find(char) for char in parent}, expansions


def _skeleton(name: str) -> str:
    prototypes, expansions = _classes()

    def mapped(text: str) -> str:
        decomposed = unicodedata.normalize("NFD", text)
        return "".join(expansions.get(char) or prototypes.get(char, char) for char in decomposed)

    # Mapped before case folding too, or ``I`` (a homoglyph of ``l``) would fold to ``i`` first; then folded, mapped
    # again, and stripped of combining marks and spaces (``ádmin`` reads as ``admin``).
    text = mapped(mapped(unicodedata.normalize("NFKC", name)).casefold())
    return "".join(char for char in unicodedata.normalize("NFD", text) if not char.isspace() and unicodedata.category(char) != "Mn")


def skeleton(name: str) -> tuple[str, str]:
    """The forms under which two confusable names are equal (see the module's docstring): the name's own, and its upper
    case's, since a homoglyph of one case need not be one of the other (``0`` is one of ``O``, not of ``o``: ``R00T``
    and ``root`` meet in upper case; ``I`` is one of ``l``: ``AIice`` and ``alice`` meet in their own)."""
    return _skeleton(name), _skeleton(name.upper())


def skeleton_digests(name: str) -> tuple[str, str]:
    """The SHA-256 (hex) of each of ``name``'s :func:`skeleton` forms: what the server database stores, UNIQUE, so
    that two look-alike names cannot both be held whichever process signs them up (a skeleton may be longer than its
    name: the digest bounds the column)."""
    own, upper = skeleton(name)
    return hashlib.sha256(own.encode("utf-8")).hexdigest(), hashlib.sha256(upper.encode("utf-8")).hexdigest()


def name_taken(name: str) -> HostingError:
    """The refusal of a name that reads like one held already."""
    return HostingError(f"the name {quote_id(name)} is taken or too like one taken; choose another")


def confusable(one: str, other: str) -> bool:
    """Whether names ``one`` and ``other`` read alike."""
    return any(a == b for a, b in zip(skeleton(one), skeleton(other), strict=True))


def check_new_name(name: str, taken: Iterable[str]) -> None:
    """Refuse ``name`` for a sign-up (one line, naming why): empty or too long, holding a control, bidi or zero-width
    character, reserved, or confusable with one of ``taken`` (the names already held)."""
    if not name.strip() or len(name) > MAX_NAME or name != name.strip():
        raise HostingError(f"a name is 1-{MAX_NAME} characters, without spaces around it")
    bad = first_unprintable(name)
    if bad:
        raise HostingError("a name may hold no control, bidi or zero-width character")
    prefix = name.rpartition("-")[0]  # local-1, worker-7: the server's own workers' names
    if any(confusable(name, word) or (prefix and confusable(prefix, word)) for word in RESERVED):
        raise HostingError(f"the name {quote_id(name)} is reserved; choose another")
    for other in taken:
        if confusable(name, other):
            raise name_taken(name)
