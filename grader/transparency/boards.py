"""The audit's check of a published board against the log: every number a row shows must be its logged, signed report's.

The server derives every number of a row from the row's signed report (grader/hosting/leaderboard/board.py), never
from the database's copy of it; this check closes the gap from the outside. For each row that links its report,
the report's envelope must be one the log holds (a ``report`` entry's ``envelope_sha256``, so the host signed and
logged it), and the row's score and task means must be the report's aggregate score and per-task measures as the
board rounds them (4 decimals). A number changed on its way to the board, a row that names a report the log never
saw, or a report link that answers another report, each fail with the row named. Rows it cannot check are said,
with why: a Ladder row (its released score withholds the finer numbers on purpose, and it links no report before
the end) is listed as not checked; a row whose report is unavailable (the board says so and shows no number) fails
the check, naming its report link, once every other row is checked.

After the end the rows link full reports (whose aggregate is the full split's, not the part's), so the row check
stops there; once the reveal is logged, each final board as served must hash to the digest the reveal names
(:func:`check_final_boards`). :func:`check_boards_against_log` picks the check by the log's stage.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rfc8785

from grader import jsonio
from grader.text import quote_id
from grader.transparency.entries import BOARD_PARTS, decode_entry
from grader.transparency.errors import LogVerificationError

#: Decimals of a published board number (grader/hosting/leaderboard/service.py rounds the same way).
BOARD_DECIMALS = 4


def logged_envelopes(entries: Iterable[bytes]) -> set[str]:
    """The envelope digests of every report entry of a log."""
    found = set()
    for entry in entries:
        decoded = decode_entry(entry)
        if decoded["kind"] == "report":
            found.add(str(decoded["envelope_sha256"]))
    return found


def _payload(envelope: bytes, where: str) -> dict[str, Any]:
    try:
        outer = jsonio.loads(envelope)
        report = jsonio.loads(base64.b64decode(str(outer["payload"]), validate=True))
    except (jsonio.JsonError, KeyError, TypeError, binascii.Error, ValueError):
        raise LogVerificationError(f"{where}: the report is not a DSSE envelope of a report") from None
    if isinstance(report, dict) and isinstance(report.get("predicate"), dict):  # an in-toto statement: the report is its predicate
        report = report["predicate"]
    if not isinstance(report, dict):
        raise LogVerificationError(f"{where}: the report is not a DSSE envelope of a report")
    return report


@dataclass(frozen=True)
class RowsChecked:
    """What :func:`board_rows` did: the rows checked, and each row it could not check with why."""

    checked: int
    unchecked: tuple[str, ...]


#: Why a Ladder row is not checked before the end.
LADDER_UNCHECKED = "a Ladder row links no report before the end (its released score withholds the public part's finer numbers on purpose)"


def board_rows(boards: Mapping[str, Any], read_report: Callable[[str], bytes], logged: set[str]) -> RowsChecked:
    """Check every row of ``boards`` (the ``/api/v1/leaderboard`` JSON) that links a report (see the module docstring).

    ``read_report`` fetches a row's ``report`` link. :class:`LogVerificationError` names the first row whose numbers
    are not its logged report's, or (after every other row is checked) each row whose report is unavailable.
    """
    checked = 0
    unchecked: list[str] = []
    unavailable: list[str] = []
    for board in boards.get("boards") or []:
        for row in board.get("entries") or []:
            link = row.get("report")
            where = f"board {quote_id(board.get('setting'))}, row of submission {quote_id(row.get('submission'))}"
            if row.get("unavailable"):
                named = f"its report {quote_id(link)}" if isinstance(link, str) else "its report"
                unavailable.append(f"{where}: {named} is unavailable (the board says {quote_id(row['unavailable'])} and shows no number for it)")
            elif row.get("ladder") and not isinstance(link, str):
                unchecked.append(f"{where}: {LADDER_UNCHECKED}")
            elif not isinstance(link, str):
                raise LogVerificationError(f"{where}: links no report")
            else:
                _check_row(row, read_report(link), where, logged)
                checked += 1
    if unavailable:
        raise LogVerificationError("; ".join(unavailable))
    return RowsChecked(checked, tuple(unchecked))


def _check_row(row: Mapping[str, Any], envelope: bytes, where: str, logged: set[str]) -> None:
    """One row's numbers against its report: the envelope logged, the score and each task mean the report's, rounded."""
    if hashlib.sha256(envelope).hexdigest() not in logged:
        raise LogVerificationError(f"{where}: its report is not in the log")
    report = _payload(envelope, where)
    aggregate = report.get("aggregate")
    score = aggregate.get("score") if isinstance(aggregate, dict) else None
    shown = row.get("score")
    if not isinstance(score, (int, float)) or shown is None or round(float(score), BOARD_DECIMALS) != shown:
        raise LogVerificationError(f"{where}: the board shows {shown}, its logged report says {score}")
    measure = aggregate.get("measure") if isinstance(aggregate, dict) else None
    tasks = report.get("tasks")
    reported = {name: _measure(task, measure) for name, task in tasks.items()} if isinstance(tasks, dict) else {}
    if row.get("tasks") != reported:
        raise LogVerificationError(f"{where}: the board shows task means {row.get('tasks')}, its logged report says {reported}")


def _measure(task: Any, measure: Any) -> float | None:
    """A task's primary measure in a report, rounded as the board rounds it (None: the report gives none)."""
    measures = task.get("measures") if isinstance(task, dict) else None
    value = measures.get(measure) if isinstance(measures, dict) else None
    return round(float(value), BOARD_DECIMALS) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def check_board(boards: Mapping[str, Any], read_report: Callable[[str], bytes], logged: set[str]) -> int:
    """:func:`board_rows`; the number of rows checked."""
    return board_rows(boards, read_report, logged).checked


def _board_json(data: bytes, where: str) -> dict[str, Any]:
    try:
        value = jsonio.loads(data)
    except jsonio.JsonError as error:
        raise LogVerificationError(f"{where}: not JSON: {error.what}") from None
    if not isinstance(value, dict):
        raise LogVerificationError(f"{where}: not a leaderboard")
    return value


def check_final_boards(reveal: Mapping[str, Any], read_board: Callable[[str], bytes]) -> None:
    """After the reveal: each final board (``read_board(part)``, the ``/api/v1/leaderboard?part=...`` JSON as served)
    must hash, as RFC 8785 JSON, to the digest the (decoded) reveal entry names; :class:`LogVerificationError` otherwise."""
    for part in BOARD_PARTS:
        served = _board_json(read_board(part), f"the {part} board")
        if hashlib.sha256(rfc8785.dumps(served)).hexdigest() != reveal[f"{part}_board_sha256"]:
            raise LogVerificationError(f"the {part} board served now is not the final {part} board the reveal logged")


def check_boards_against_log(entries: Sequence[bytes], read: Callable[[str], bytes]) -> str:
    """What ``grader log audit --board`` checks, by the log's stage; the line it prints.

    ``read(path)`` fetches a path of the host (``api/v1/leaderboard?part=public``, a row's report link without its
    leading ``/``). Before the end: every row against its logged report (:func:`check_board`); after the end, before
    the reveal: nothing (rows link full reports); after the reveal: the final boards (:func:`check_final_boards`).
    """
    decoded = [decode_entry(entry) for entry in entries]
    reveal = next((entry for entry in decoded if entry["kind"] == "reveal"), None)
    if reveal is not None:
        check_final_boards(reveal, lambda part: read(f"api/v1/leaderboard?part={part}"))
        return "board: the final public and private boards are the ones the reveal logged"
    if any(entry["kind"] == "end" for entry in decoded):
        return "board: not checked: the competition ended (rows link full reports) and the reveal is not logged yet"
    boards = _board_json(read("api/v1/leaderboard"), "the public board")
    rows = board_rows(boards, lambda link: read(link.lstrip("/")), logged_envelopes(entries))
    lines = [f"board: {rows.checked} row(s) show the score and task means of their logged report"]
    return "\n".join(lines + [f"board: not checked: {why}" for why in rows.unchecked])
