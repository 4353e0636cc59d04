"""The rules a grader log's entries follow, checked over a whole log (``grader log audit``).

* every entry is one of the canonical shapes of :mod:`grader.transparency.entries`;
* entry 0, and only entry 0, is the ``competition`` entry;
* at most one ``end`` and at most one ``reveal``, the reveal after the end, disclosing exactly
  the keys entry 0 committed to;
* a ``retraction`` withdraws an earlier entry other than entry 0, and only once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grader.transparency.entries import check_reveal, decode_entry
from grader.transparency.errors import LogVerificationError


@dataclass(frozen=True)
class AuditSummary:
    """What an audit found: entries per kind, the retracted indexes, and whether the reveal was checked."""

    kinds: dict[str, int]
    retracted: tuple[int, ...]
    revealed: bool


def audit_entries(entries: Sequence[bytes]) -> AuditSummary:
    """Check the module's rules over a log's entries, in order; :class:`LogVerificationError` naming the first
    entry that breaks one."""
    decoded: list[dict[str, Any]] = []
    for index, data in enumerate(entries):
        try:
            decoded.append(decode_entry(data))
        except LogVerificationError as error:
            raise LogVerificationError(f"entry {index}: {error}") from None
    if not decoded or decoded[0]["kind"] != "competition":
        raise LogVerificationError("entry 0 is not the competition's commitment")
    end = reveal = None
    retracted: list[int] = []
    for index, entry in enumerate(decoded[1:], start=1):
        kind = entry["kind"]
        if kind == "competition":
            raise LogVerificationError(f"entry {index}: a second competition entry")
        if kind == "end":
            if end is not None:
                raise LogVerificationError(f"entry {index}: a second end (the first is entry {end})")
            end = index
        elif kind == "reveal":
            if end is None or reveal is not None:
                raise LogVerificationError(f"entry {index}: a reveal before the end, or a second one")
            try:
                check_reveal(decoded[0], entry)
            except LogVerificationError as error:
                raise LogVerificationError(f"entry {index}: {error}") from None
            reveal = index
        elif kind == "retraction":
            target = entry["index"]
            if not 0 < target < index or target in retracted:
                raise LogVerificationError(f"entry {index}: retracts entry {target}, which is not an earlier entry still standing")
            retracted.append(target)
    kinds = Counter(entry["kind"] for entry in decoded)
    return AuditSummary(dict(sorted(kinds.items())), tuple(retracted), reveal is not None)
