"""The rules a grader log's entries follow, checked over a whole log (``grader log audit``).

* every entry is one of the canonical shapes of :mod:`grader.transparency.entries`;
* entry 0, and only entry 0, is the ``competition`` entry;
* at most one ``end`` and at most one ``reveal``, the reveal after the end, disclosing exactly
  the keys entry 0 committed to;
* no ``receipt``, no ``registration`` (a person who signed up) and no ``team`` (a membership change) after the end, in the log's order or by its time (an upload completed before the end still counts and
  is graded after it: its receipt precedes the end entry, its reports may follow);
  whether a report after the end is of a submission received before it is not checked here: each entry commits to its
  submission under a key of its own, so a report is tied to its receipt only by opening both to a named submission,
  which the final boards give after the reveal (:mod:`grader.cli.log_final`);
* after the reveal, nothing but retractions (and a rewind after a disaster): the reveal published the keys and the final boards' digests, so a grade,
  a rejudge or a receipt after it would change results everyone may already have checked (and a competition reopened
  under the revealed partition secret and blinding key would show anyone the private queries and every pseudonym);
* a ``phase_end`` (an earlier phase closed) at most once per phase and before the competition's end; a
  ``phase_board`` (that phase's final boards) only after its phase's end, once;
* a ``retraction`` withdraws an earlier entry other than entry 0, and only once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grader.transparency.entries import check_reveal, decode_entry
from grader.transparency.errors import LogVerificationError

#: What a log may hold after its reveal: statements about the log itself, never an event of the competition (a
#: retraction withdraws an entry; a rewind owns up to entries lost in a disaster, which could only be retractions).
AFTER_THE_REVEAL = frozenset({"retraction", "rewind"})
#: Entries no log holds after its end, and what each would mean: nothing received after the end counts, and nobody
#: joins a competition that is over.
LATE = {
    "receipt": "an upload received after the end",
    "registration": "a person registered after the end",
    "team": "a team membership changed after the end",
}


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
    phase_ends: dict[str, int] = {}
    phase_boards: set[str] = set()
    # entry times are YYYY-MM-DDTHH:MM:SSZ (decode_entry checks it), so their strings compare as the moments do
    logged_end = next(((index, entry["time"]) for index, entry in enumerate(decoded) if entry["kind"] == "end"), None)
    for index, entry in enumerate(decoded[1:], start=1):
        kind = entry["kind"]
        if reveal is not None and kind not in AFTER_THE_REVEAL:
            raise LogVerificationError(f"entry {index}: a {kind} after the reveal (entry {reveal}): after it the log takes nothing but retractions")
        if kind in LATE and logged_end is not None and (index > logged_end[0] or entry["time"] > logged_end[1]):
            raise LogVerificationError(f"entry {index}: a {kind} after the end (entry {logged_end[0]}, {logged_end[1]}): {LATE[kind]}")
        if kind == "competition":
            raise LogVerificationError(f"entry {index}: a second competition entry")
        if kind == "end":
            if end is not None:
                raise LogVerificationError(f"entry {index}: a second end (the first is entry {end})")
            end = index
        elif kind == "phase_end":
            if end is not None or entry["phase"] in phase_ends:
                raise LogVerificationError(f"entry {index}: a phase's end after the competition's end, or a second end of phase {entry['phase']!r}")
            phase_ends[entry["phase"]] = index
        elif kind == "phase_board":
            if entry["phase"] not in phase_ends or entry["phase"] in phase_boards:
                raise LogVerificationError(f"entry {index}: the boards of phase {entry['phase']!r} before its end, or a second time")
            phase_boards.add(entry["phase"])
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
