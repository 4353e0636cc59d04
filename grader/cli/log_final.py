"""The audit's recomputation of the final boards from the signed full reports (``grader log audit URL --board``, after the reveal).

The reveal entry names a digest of each final board as served, so a board changed *after* the reveal is caught by
:func:`grader.transparency.boards.check_final_boards`. A score changed in the database *before* the reveal (after the
end) would be hashed into the reveal as it stood. This check closes that gap: once the partition secret is public,
every final row's full report is fetched (the server serves them after the end), its envelope must be a logged
``report`` entry that opens (under the revealed identifier key) to the row's own submission and participant, and
verify with the host key entry 0 names; the row's score and task means are computed again from the report's
per-query values with the server's own part scoring (:func:`grader.hosting.leaderboard.values.score_parts`, the code
acceptance scores with) and rounded as the board rounds; each board's order must follow the recomputed scores.
A row whose report was logged after the end must be of a submission received before it: a ``receipt`` before the end
entry opens to the same submission and participant. This is the one place the audit can tie a report to its receipt:
each entry commits to its identifiers under a key of its own, so two entries are linked only by opening both to a
named submission, and only the final rows name theirs (a report off the boards stays unlinked).
Every differing row is collected (:class:`FinalBoardsDiffer`) so the CLI can print them all.
Ladder rows (a released score that withholds on purpose) are checked for their report only.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grader import jsonio
from grader.errors import GraderError, VerificationError
from grader.hosting.leaderboard.values import score_parts, values_of
from grader.hosting.participant.reveal_check import BOARD_DECIMALS, public_key_from_pem
from grader.reports.model import Report
from grader.reports.verify import verify_envelope
from grader.text import quote_id
from grader.transparency.entries import BOARD_PARTS, decode_entry, entry_opens, key_of_entry
from grader.transparency.errors import LogVerificationError
from grader.transparency.published import HOST_KEY_PATH, PARTITION_PATH


@dataclass(frozen=True)
class Mismatch:
    """One final row whose served number or place is not what its signed report gives."""

    part: str
    setting: str
    submission: str
    served: Any
    recomputed: float
    what: str

    def line(self) -> str:
        """The row as printed: board, submission, served and recomputed numbers."""
        return (
            f"{self.part} board {quote_id(self.setting)}, submission {quote_id(self.submission)}: "
            f"served {self.served}, recomputed {self.recomputed:.{BOARD_DECIMALS}f} ({self.what})"
        )


class FinalBoardsDiffer(LogVerificationError):
    """The final boards served are not the ones the logged, signed reports give; ``rows`` are the differing rows."""

    def __init__(self, rows: Sequence[Mismatch]) -> None:
        super().__init__(f"{len(rows)} final board row(s) differ from what their signed reports give")
        self.rows = tuple(rows)


def _json(data: bytes, where: str) -> dict[str, Any]:
    try:
        value = jsonio.loads(data)
    except jsonio.JsonError as error:
        raise LogVerificationError(f"{where}: not JSON: {error.what}") from None
    if not isinstance(value, dict):
        raise LogVerificationError(f"{where}: not a JSON object")
    return value


def _opened(first: Mapping[str, Any], read: Callable[[str], bytes]) -> tuple[bytes, float, Any]:
    """The partition secret (opening entry 0's commitment), the public fraction, and the host key entry 0 names."""
    partition = _json(read(PARTITION_PATH), PARTITION_PATH)
    try:
        secret = bytes.fromhex(str(partition.get("secret")))
        fraction = float(partition["public_fraction"])
    except (KeyError, TypeError, ValueError):
        raise LogVerificationError(f"{PARTITION_PATH}: no partition secret and public fraction served") from None
    if not hmac.compare_digest(hashlib.sha256(secret).hexdigest(), str(first["partition_commitment"])):
        raise LogVerificationError(f"{PARTITION_PATH}: the partition secret served does not open entry 0's commitment")
    try:
        key = public_key_from_pem(read(HOST_KEY_PATH), HOST_KEY_PATH)
    except VerificationError as error:
        raise LogVerificationError(str(error)) from None
    if hashlib.sha256(key.public_bytes_raw()).hexdigest() != first["host_key_id"]:
        raise LogVerificationError(f"{HOST_KEY_PATH}: the host key served is not the one entry 0 names")
    return secret, fraction, key


def _reports_by_envelope(decoded: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[int, Mapping[str, Any]]]]:
    """The log's report entries (with their indexes) by the digest of the envelope each names."""
    found: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for index, entry in enumerate(decoded):
        if entry["kind"] == "report":
            found.setdefault(str(entry["envelope_sha256"]), []).append((index, entry))
    return found


def _receipts_before(decoded: Sequence[Mapping[str, Any]], end: int, identifier: bytes) -> list[tuple[Mapping[str, Any], bytes]]:
    """The receipts logged before entry ``end``, each with its entry key (derived once: every late row opens them all)."""
    return [(entry, key_of_entry(identifier, entry)) for entry in decoded[:end] if entry["kind"] == "receipt"]


@dataclass(frozen=True)
class _Opened:
    """What the reveal made public: the secret, the fraction, the host key, the identifier key, the logged reports,
    the end entry's index and the receipts before it."""

    secret: bytes
    fraction: float
    key: Any
    identifier: bytes
    reports: dict[str, list[tuple[int, Mapping[str, Any]]]]
    end: int
    receipts: list[tuple[Mapping[str, Any], bytes]]


def _check_received_before_the_end(index: int, names: Mapping[str, str], where: str, opened: _Opened) -> None:
    """A report logged after the end (entry ``index``) must be of a submission received before it: graded late is
    allowed, received late is not. A receipt after the end already fails the audit, so this catches the report of a
    submission the host added after the end without a receipt, backdated or not."""
    if index < opened.end:
        return  # graded before the end, so received before it
    if not any(entry_opens(entry, key, **names) for entry, key in opened.receipts):
        raise LogVerificationError(f"entry {index}: a report after the end (entry {opened.end}) of a submission with no receipt before it: {where}")


def _row_score(envelope: bytes, row: Mapping[str, Any], where: str, opened: _Opened, part: str) -> tuple[float, dict[str, float]]:
    """The part score and task means the row's full report gives, after checking the report is a logged entry of the row's own
    submission and participant (the reveal opens every entry) and is signed by the host key entry 0 names."""
    logged = opened.reports.get(hashlib.sha256(envelope).hexdigest())
    if not logged:
        raise LogVerificationError(f"{where}: its report is not in the log")
    # a team's row names the member who made the submission (made_by): the name its log entries commit
    names = {"submission": str(row.get("submission")), "participant": str(row.get("made_by") or row.get("participant"))}
    own = [index for index, entry in logged if entry_opens(entry, key_of_entry(opened.identifier, entry), **names)]
    if not own:
        raise LogVerificationError(f"{where}: its report is logged for another submission or participant")
    _check_received_before_the_end(own[0], names, where, opened)
    try:
        report = verify_envelope(envelope, opened.key).report
        scored = score_parts(values_of(Report.from_json(report)), opened.secret, opened.fraction)[part]
    except GraderError as error:
        raise LogVerificationError(f"{where}: its report does not give a {part} score: {error}") from None
    return float(scored["score"]), {task: float(mean) for task, mean in scored["tasks"].items()}


def _rounded(value: float) -> float:
    return round(value, BOARD_DECIMALS)


def board_mismatches(
    part: str, board: Mapping[str, Any], score_of: Callable[[Mapping[str, Any], str], tuple[float, dict[str, float]]]
) -> list[Mismatch]:
    """The rows of one served board whose score, task means or place differ from what their reports give."""
    setting = str(board.get("setting"))
    found: list[Mismatch] = []
    previous: dict[bool, float] = {}  # the last recomputed score of the baselines' rows and of the ranked rows
    for row in board.get("entries") or []:
        link = row.get("report")
        where = f"{part} board {quote_id(setting)}, row of submission {quote_id(row.get('submission'))}"
        if not isinstance(link, str):
            raise LogVerificationError(f"{where}: links no report after the end")
        score, tasks = score_of(row, where)
        if row.get("ladder"):
            continue
        mismatch = Mismatch(part, setting, str(row.get("submission")), row.get("score"), score, "")
        if _rounded(score) != row.get("score"):
            found.append(replace(mismatch, what="score"))
        shown = row.get("tasks")
        if not isinstance(shown, dict) or shown != {task: _rounded(mean) for task, mean in tasks.items()}:
            found.append(replace(mismatch, served=shown, recomputed=score, what=f"task means: recomputed {_task_means(tasks)}"))
        ranked = row.get("rank") is not None
        if ranked in previous and score > previous[ranked]:
            found.append(replace(mismatch, what="placed below a lower score"))
        previous[ranked] = score
    return found


def _task_means(tasks: Mapping[str, float]) -> str:
    return ", ".join(f"{task} {mean:.{BOARD_DECIMALS}f}" for task, mean in sorted(tasks.items()))


def check_final_scores(entries: Sequence[bytes], read: Callable[[str], bytes]) -> str | None:
    """After the reveal: recompute every final board row from its logged, signed full report (the module's check);
    the line to print, None before the reveal, :class:`FinalBoardsDiffer` naming every differing row."""
    decoded = [decode_entry(entry) for entry in entries]
    if not any(entry["kind"] == "reveal" for entry in decoded):
        return None
    reveal = next(entry for entry in decoded if entry["kind"] == "reveal")
    end = next((index for index, entry in enumerate(decoded) if entry["kind"] == "end"), None)
    if end is None:
        raise LogVerificationError("the log holds a reveal but no end")  # audit_entries refuses it first; said here too
    secret, fraction, key = _opened(decoded[0], read)
    try:
        identifier = bytes.fromhex(str(reveal["identifier_key"]))
    except ValueError:
        raise LogVerificationError("the reveal discloses no identifier key") from None
    opened = _Opened(secret, fraction, key, identifier, _reports_by_envelope(decoded), end, _receipts_before(decoded, end, identifier))
    differing: list[Mismatch] = []
    rows = 0
    for part in BOARD_PARTS:

        def score_of(row: Mapping[str, Any], where: str, part: str = part) -> tuple[float, dict[str, float]]:
            return _row_score(read(str(row["report"]).lstrip("/")), row, where, opened, part)

        for board in _json(read(f"api/v1/leaderboard?part={part}"), f"the {part} board").get("boards") or []:
            differing += board_mismatches(part, board, score_of)
            rows += len(board.get("entries") or [])
    if differing:
        raise FinalBoardsDiffer(differing)
    return f"scores: {rows} final row(s) recomputed from their logged, signed full reports: scores and order as served"
