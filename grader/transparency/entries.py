"""What the log holds: small RFC 8785 canonical JSON entries of digests and events, never scores.

Every entry has ``kind``, ``v`` (the format version, 1) and ``time`` (UTC, ``YYYY-MM-DDTHH:MM:SSZ``).
Entries that concern a participant carry a fresh ``salt`` and name the participant, the
submission and the upload only through keyed per-entry commitments
(:mod:`grader.transparency.commitments`), so that before the reveal no two entries of one participant
share a value. The kinds, in the order a competition writes them:

=================  =====================================================================================
``competition``    entry 0: the competition file's digest, the partition, identifier and blinding key
                   commitments, the data digests, the host's and the log's key ids, the log's origin
``registration``   a person registered by sign-up (committed participant, the digest of the rules accepted)
``team``           a team membership change: ``create``, ``join`` or ``leave`` (committed participant and team name)
``receipt``        an accepted upload (committed participant, submission and upload digest)
``report``         a report the host signed, failed grades included: SHA-256 of the DSSE payload and of
                   the envelope, the attempt, the status
``outcome``        a grade that ended with no report signed (a participant failure code without a report,
                   or ``error`` at the attempt limit): the attempt, the status, the failure code
``cancellation``   a submission cancelled, by its participant or an admin
``rejudge``        a submission queued again, with its new attempt and the admin's reason
``repin``          new data digests, grader version or competition file
``board``          the digest of a board (``public`` or ``private``) as it changes
``finals``         a board row's final choices at the deadline (committed; a team's row: the team's name too)
``end``            the competition ended
``reveal``         every key entry 0 committed to, and the digests of the final boards
``retraction``     an admin's signed statement that an earlier entry is withdrawn (never a deletion)
``rewind``         an admin's statement that the log restarts from an older state of its database after a
                   disaster: the newest checkpoint it had published, which the log no longer extends
=================  =====================================================================================

:func:`decode_entry` reads an entry back, refusing anything that is not canonical or not exactly
one of these shapes; :func:`check_reveal` checks a reveal against entry 0.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import rfc8785

from grader import jsonio
from grader.errors import UsageError
from grader.failures import FailureCode
from grader.text import quote_id
from grader.transparency.commitments import SALT_BYTES, EntryCommitter, entry_key, opens
from grader.transparency.errors import LogVerificationError
from grader.transparency.tiles import MAX_ENTRY_BYTES

ENTRY_VERSION = 1
#: Report statuses an entry records (a grade that failed is logged too).
REPORT_STATUSES = ("scored", "failed", "error")
#: Statuses of a grade that ended without a signed report.
OUTCOME_STATUSES = ("failed", "error")
CANCELLED_BY = ("participant", "admin")
BOARD_PARTS = ("public", "private")
#: Fields whose values come from a small public vocabulary: shared by everyone's entries, they link no one.
#: ``rules_sha256`` is the competition's rules text's digest: one value for everyone who signed up under that text.
#: ``action`` is a team entry's ``create``, ``join`` or ``leave``.
PUBLIC_VOCABULARY_FIELDS = frozenset({"kind", "v", "status", "attempt", "by", "failure_code", "rules_sha256", "action"})
#: What a ``team`` entry records happened.
TEAM_ACTIONS = ("create", "join", "leave")
_MAX_TEXT = 200
_MAX_DIGESTS = 256
_MAX_FINALS = 16

_HEX64 = re.compile(r"[0-9a-f]{64}")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_Check = Callable[[Any], bool]


def _hex64(value: Any) -> bool:
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def _hex64_or_null(value: Any) -> bool:
    return value is None or _hex64(value)


def _salt(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(f"[0-9a-f]{{{2 * SALT_BYTES}}}", value) is not None


def _time(value: Any) -> bool:
    if not isinstance(value, str) or _TIME.fullmatch(value) is None:
        return False
    try:
        datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return False
    return True


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**63


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_TEXT and value.isprintable()


def _one_of(*choices: str) -> _Check:
    return lambda value: value in choices


def _digests(value: Any) -> bool:
    return isinstance(value, dict) and len(value) <= _MAX_DIGESTS and all(_text(name) and _hex64(digest) for name, digest in value.items())


def _commitments(value: Any) -> bool:
    return isinstance(value, list) and 1 <= len(value) <= _MAX_FINALS and all(_hex64(item) for item in value)


def _key_hex(value: Any) -> bool:
    return value is None or (isinstance(value, str) and re.fullmatch(r"(?:[0-9a-f]{2}){16,64}", value) is not None)


_COMMON: dict[str, _Check] = {"kind": lambda value: isinstance(value, str), "v": lambda value: value == ENTRY_VERSION, "time": _time}
_IDENTIFIED: dict[str, _Check] = {"salt": _salt, "participant": _hex64}

#: Every kind's fields (besides ``kind``, ``v``, ``time``) and the check of each value; all are required.
SCHEMAS: dict[str, dict[str, _Check]] = {
    "competition": {
        "origin": _text,
        "competition_sha256": _hex64,
        "partition_commitment": _hex64,
        "identifier_commitment": _hex64,
        "blinding_commitment": _hex64_or_null,
        "data_digests": _digests,
        "host_key_id": _hex64,
        "log_key_id": _hex64,
    },
    "registration": {**_IDENTIFIED, "rules_sha256": _hex64},
    "team": {**_IDENTIFIED, "team": _hex64, "action": _one_of(*TEAM_ACTIONS)},
    "receipt": {**_IDENTIFIED, "submission": _hex64, "upload": _hex64},
    "report": {
        **_IDENTIFIED,
        "submission": _hex64,
        "attempt": _count,
        "status": _one_of(*REPORT_STATUSES),
        "payload_sha256": _hex64,
        "envelope_sha256": _hex64,
    },
    "outcome": {
        **_IDENTIFIED,
        "submission": _hex64,
        "attempt": _count,
        "status": _one_of(*OUTCOME_STATUSES),
        "failure_code": _one_of(*(code.value for code in FailureCode)),
    },
    "cancellation": {**_IDENTIFIED, "submission": _hex64, "by": _one_of(*CANCELLED_BY)},
    "rejudge": {**_IDENTIFIED, "submission": _hex64, "attempt": _count, "reason": _text},
    "repin": {"data_digests": _digests, "grader_version": _text, "competition_sha256": _hex64},
    "board": {"part": _one_of(*BOARD_PARTS), "board_sha256": _hex64},
    "finals": {**_IDENTIFIED, "submissions": _commitments},
    "end": {},
    "phase_end": {"phase": _text},
    "phase_board": {"phase": _text, "public_board_sha256": _hex64, "private_board_sha256": _hex64},
    "reveal": {
        "partition_secret": _key_hex,
        "identifier_key": _key_hex,
        "blinding_key": _key_hex,
        "public_board_sha256": _hex64,
        "private_board_sha256": _hex64,
    },
    "retraction": {"index": _count, "admin": _text, "reason": _text},
    "rewind": {"published_size": _count, "published_root": _hex64, "admin": _text, "reason": _text},
}


#: Fields a kind may hold besides its required ones: a team's row's ``finals`` commit the team's name too.
OPTIONAL: dict[str, dict[str, _Check]] = {"finals": {"team": _hex64}}


def _check(entry: Mapping[str, Any]) -> None:
    kind = entry.get("kind")
    schema = SCHEMAS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        raise LogVerificationError(f"unknown entry kind {quote_id(kind)}")
    fields = {**_COMMON, **schema}
    optional = {name: check for name, check in OPTIONAL.get(str(kind), {}).items() if name in entry}
    missing = sorted(set(fields) - set(entry))
    extra = sorted(set(entry) - set(fields) - set(optional))
    if missing or extra:
        raise LogVerificationError(f"{kind} entry: missing {missing or 'nothing'}, unexpected {[quote_id(name) for name in extra] or 'nothing'}")
    for name, check in {**fields, **optional}.items():
        if not check(entry[name]):
            raise LogVerificationError(f"{kind} entry: field {name} has an invalid value")


def encode_entry(entry: Mapping[str, Any]) -> bytes:
    """The canonical bytes of an entry, after checking its shape (a :class:`~grader.errors.UsageError` if wrong)."""
    try:
        _check(entry)
    except LogVerificationError as error:
        raise UsageError(str(error)) from None
    data = rfc8785.dumps(dict(entry))
    if len(data) > MAX_ENTRY_BYTES:
        raise UsageError(f"a {entry['kind']} entry of {len(data)} bytes is larger than a log entry may be ({MAX_ENTRY_BYTES})")
    return data


def decode_entry(data: bytes) -> dict[str, Any]:
    """An entry read from the log: canonical JSON of exactly one known shape; :class:`LogVerificationError` otherwise."""
    try:
        value = jsonio.loads(data, max_bytes=MAX_ENTRY_BYTES, max_depth=3)
    except jsonio.JsonError as error:
        raise LogVerificationError(f"a log entry is not JSON: {error.what}") from None
    if not isinstance(value, dict):
        raise LogVerificationError("a log entry is not a JSON object")
    _check(value)
    if rfc8785.dumps(value) != data:
        raise LogVerificationError(f"a {value['kind']} entry is not RFC 8785 canonical JSON")
    return value


def format_time(moment: datetime) -> str:
    """``moment`` (timezone-aware) in UTC to the second, as entries write it."""
    if moment.tzinfo is None:
        raise UsageError("an entry's time must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """An entry's ``time`` (``YYYY-MM-DDTHH:MM:SSZ``) as a timezone-aware UTC moment."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise LogVerificationError(f"an entry's time {text!r} is not YYYY-MM-DDTHH:MM:SSZ") from None


def _base(kind: str, time: datetime, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "v": ENTRY_VERSION, "time": format_time(time), **fields}


def _identified(kind: str, committer: EntryCommitter, time: datetime, participant: str, **fields: Any) -> dict[str, Any]:
    return _base(kind, time, salt=committer.salt.hex(), participant=committer.commit("participant", participant), **fields)


def competition_entry(
    *,
    time: datetime,
    origin: str,
    competition_sha256: str,
    partition_commitment: str,
    identifier_commitment: str,
    blinding_commitment: str | None,
    data_digests: Mapping[str, str],
    host_key_id: str,
    log_key_id: str,
) -> bytes:
    """Entry 0: what the competition commits to before anyone submits."""
    return encode_entry(
        _base(
            "competition",
            time,
            origin=origin,
            competition_sha256=competition_sha256,
            partition_commitment=partition_commitment,
            identifier_commitment=identifier_commitment,
            blinding_commitment=blinding_commitment,
            data_digests=dict(data_digests),
            host_key_id=host_key_id,
            log_key_id=log_key_id,
        )
    )


def team_entry(committer: EntryCommitter, *, time: datetime, participant: str, team: str, action: str) -> bytes:
    """``participant`` created, joined or left (``action``) team ``team``: both names committed under the entry's key,
    so that before the reveal the log shows that memberships changed and when, never whose or which team's."""
    return encode_entry(_identified("team", committer, time, participant, team=committer.commit("team", team), action=action))


def registration_entry(committer: EntryCommitter, *, time: datetime, participant: str, rules_sha256: str) -> bytes:
    """A person registered by sign-up, having accepted the rules text whose SHA-256 is ``rules_sha256``."""
    return encode_entry(_identified("registration", committer, time, participant, rules_sha256=rules_sha256))


def receipt_entry(committer: EntryCommitter, *, time: datetime, participant: str, submission: str, upload_sha256: str) -> bytes:
    """An accepted upload: the participant gets this entry, its entry key and its inclusion proof."""
    return encode_entry(
        _identified(
            "receipt",
            committer,
            time,
            participant,
            submission=committer.commit("submission", submission),
            upload=committer.commit("upload", upload_sha256),
        )
    )


def report_entry(
    committer: EntryCommitter,
    *,
    time: datetime,
    participant: str,
    submission: str,
    attempt: int,
    status: str,
    payload_sha256: str,
    envelope_sha256: str,
) -> bytes:
    """A report the host signed (``status`` scored, failed or error): digests of its DSSE payload and envelope."""
    return encode_entry(
        _identified(
            "report",
            committer,
            time,
            participant,
            submission=committer.commit("submission", submission),
            attempt=attempt,
            status=status,
            payload_sha256=payload_sha256,
            envelope_sha256=envelope_sha256,
        )
    )


def outcome_entry(
    committer: EntryCommitter, *, time: datetime, participant: str, submission: str, attempt: int, status: str, failure_code: str
) -> bytes:
    """A grade that ended (``status`` failed or error) with no report signed: an accepted upload never graded is visible too."""
    return encode_entry(
        _identified(
            "outcome",
            committer,
            time,
            participant,
            submission=committer.commit("submission", submission),
            attempt=attempt,
            status=status,
            failure_code=failure_code,
        )
    )


def cancellation_entry(committer: EntryCommitter, *, time: datetime, participant: str, submission: str, by: str) -> bytes:
    """A submission cancelled ``by`` its participant or an admin."""
    return encode_entry(_identified("cancellation", committer, time, participant, submission=committer.commit("submission", submission), by=by))


def rejudge_entry(committer: EntryCommitter, *, time: datetime, participant: str, submission: str, attempt: int, reason: str) -> bytes:
    """A submission queued again as ``attempt``, with the admin's ``reason``."""
    return encode_entry(
        _identified("rejudge", committer, time, participant, submission=committer.commit("submission", submission), attempt=attempt, reason=reason)
    )


def repin_entry(*, time: datetime, data_digests: Mapping[str, str], grader_version: str, competition_sha256: str) -> bytes:
    """The pinned data, grader version or competition file changed."""
    return encode_entry(_base("repin", time, data_digests=dict(data_digests), grader_version=grader_version, competition_sha256=competition_sha256))


def board_entry(*, time: datetime, part: str, board_sha256: str) -> bytes:
    """A board (``public`` or ``private``) changed: the digest of its canonical form."""
    return encode_entry(_base("board", time, part=part, board_sha256=board_sha256))


def finals_entry(committer: EntryCommitter, *, time: datetime, participant: str, submissions: Sequence[str], team: str | None = None) -> bytes:
    """One board row's final choices at the deadline (each submission committed under its own field name): a
    participant's own row, or with ``team`` a team's row, ``participant`` then the member who chose (both committed)."""
    committed = [committer.commit(f"final {position}", submission) for position, submission in enumerate(submissions)]
    row = {} if team is None else {"team": committer.commit("team", team)}
    return encode_entry(_identified("finals", committer, time, participant, submissions=committed, **row))


def end_entry(*, time: datetime) -> bytes:
    """The competition ended."""
    return encode_entry(_base("end", time))


def phase_end_entry(*, time: datetime, phase: str) -> bytes:
    """A phase of the competition (not its last) closed at ``time``: it accepts nothing more, ever."""
    return encode_entry(_base("phase_end", time, phase=phase))


def phase_board_entry(*, time: datetime, phase: str, public_board_sha256: str, private_board_sha256: str) -> bytes:
    """A closed phase's final boards, once none of its grades is in flight: the digests of its public and private boards
    as ``/api/v1/leaderboard?phase=NAME&part=...`` serves them after the competition's end (its keys stay unrevealed
    until the competition's reveal: the next phases use them)."""
    return encode_entry(_base("phase_board", time, phase=phase, public_board_sha256=public_board_sha256, private_board_sha256=private_board_sha256))


def reveal_entry(
    *, time: datetime, partition_secret: bytes, identifier_key: bytes, blinding_key: bytes | None, public_board_sha256: str, private_board_sha256: str
) -> bytes:
    """Every key entry 0 committed to, and the digests of the final public and private boards."""
    return encode_entry(
        _base(
            "reveal",
            time,
            partition_secret=partition_secret.hex(),
            identifier_key=identifier_key.hex(),
            blinding_key=None if blinding_key is None else blinding_key.hex(),
            public_board_sha256=public_board_sha256,
            private_board_sha256=private_board_sha256,
        )
    )


def retraction_entry(*, time: datetime, index: int, admin: str, reason: str) -> bytes:
    """An admin withdraws entry ``index``: the entry stays in the log; this says why it no longer counts."""
    return encode_entry(_base("retraction", time, index=index, admin=admin, reason=reason))


def rewind_entry(*, time: datetime, published_size: int, published_root: bytes, admin: str, reason: str) -> bytes:
    """An admin restarts the log from an older state after a disaster: the newest checkpoint it had published
    (``published_size`` entries, root ``published_root``), which the log no longer extends."""
    return encode_entry(_base("rewind", time, published_size=published_size, published_root=published_root.hex(), admin=admin, reason=reason))


def _matches(secret_hex: str | None, commitment: str | None, what: str) -> None:
    if commitment is None and secret_hex is None:
        return
    if commitment is None or secret_hex is None:
        raise LogVerificationError(f"the reveal and entry 0 disagree on whether there is a {what}")
    if not hmac.compare_digest(hashlib.sha256(bytes.fromhex(secret_hex)).hexdigest(), commitment):
        raise LogVerificationError(f"the revealed {what} is not the one entry 0 committed to")


def check_reveal(competition: Mapping[str, Any], reveal: Mapping[str, Any]) -> None:
    """Raise :class:`LogVerificationError` unless every key of the (decoded) reveal is the one entry 0 committed to."""
    if competition.get("kind") != "competition" or reveal.get("kind") != "reveal":
        raise LogVerificationError("check_reveal takes entry 0 and a reveal entry")
    _matches(reveal["partition_secret"], competition["partition_commitment"], "partition secret")
    _matches(reveal["identifier_key"], competition["identifier_commitment"], "identifier key")
    _matches(reveal["blinding_key"], competition["blinding_commitment"], "blinding key")


def entry_opens(entry: Mapping[str, Any], key: bytes, **values: str) -> bool:
    """Whether the (decoded) entry's commitments open to ``values`` (field name -> identifier) under entry key ``key``:
    what a participant checks with the key of their receipt, and anyone after the reveal."""
    for name, value in values.items():
        committed = entry.get(name)
        if not isinstance(committed, str) or not opens(key, name, value, committed):
            return False
    return True


def key_of_entry(identifier_key: bytes, entry: Mapping[str, Any]) -> bytes:
    """After the reveal: the entry key of a (decoded) entry that names a participant."""
    salt = entry.get("salt")
    if not _salt(salt):
        raise LogVerificationError(f"a {entry.get('kind')} entry has no salt")
    return entry_key(identifier_key, bytes.fromhex(str(salt)))
