"""The audit's check of a published board against the log: every row must be the number of a logged, signed report.

Before the end a board comes from database rows the log does not cover. This check closes that gap from the
outside: for each row that links its report, the report's envelope must be one the log holds (a ``report``
entry's ``envelope_sha256``, so the host signed and logged it), and the row's score must be the report's
aggregate score as the board rounds it (4 decimals). A score changed in the database, a row that names a
report the log never saw, or a report link that answers another report, each fail with the row named.
Rows of a Ladder board (whose released score withholds on purpose) are skipped.

After the end the rows link full reports (whose aggregate is the full split's, not the part's), so the row check
stops there; once the reveal is logged, each final board as served must hash to the digest the reveal names
(:func:`check_final_boards`). :func:`check_boards_against_log` picks the check by the log's stage.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
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


def check_board(boards: Mapping[str, Any], read_report: Callable[[str], bytes], logged: set[str]) -> int:
    """Check every row of ``boards`` (the ``/api/v1/leaderboard`` JSON) that links a report; the number of rows checked.

    ``read_report`` fetches a row's ``report`` link. :class:`LogVerificationError` names the first row at fault.
    """
    checked = 0
    for board in boards.get("boards") or []:
        for row in board.get("entries") or []:
            link = row.get("report")
            if not isinstance(link, str) or row.get("ladder"):
                continue
            where = f"board {quote_id(board.get('setting'))}, row of submission {quote_id(row.get('submission'))}"
            envelope = read_report(link)
            if hashlib.sha256(envelope).hexdigest() not in logged:
                raise LogVerificationError(f"{where}: its report is not in the log")
            aggregate = _payload(envelope, where).get("aggregate")
            score = aggregate.get("score") if isinstance(aggregate, dict) else None
            shown = row.get("score")
            if not isinstance(score, (int, float)) or shown is None or round(float(score), BOARD_DECIMALS) != shown:
                raise LogVerificationError(f"{where}: the board shows {shown}, its logged report says {score}")
            checked += 1
    return checked


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
    rows = check_board(boards, lambda link: read(link.lstrip("/")), logged_envelopes(entries))
    return f"board: {rows} row(s) show the score of their logged report"
