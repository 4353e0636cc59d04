"""Log entries: canonical shapes, the keyed per-entry commitments, and what a participant's entries share."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import rfc8785

from grader.errors import UsageError
from grader.transparency import entries as e
from grader.transparency.commitments import EntryCommitter, commit, entry_key, key_commitment, new_identifier_key
from grader.transparency.errors import LogVerificationError

IDENTIFIER_KEY = new_identifier_key()
PARTITION_SECRET = bytes(range(32))
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
DIGEST = hashlib.sha256(b"x").hexdigest()
#: A team's name, committed in its members' team entries.
TEAM = "Lighthouse"


def _entry0(**changes: Any) -> bytes:
    fields: dict[str, Any] = dict(
        time=START,
        origin="grader.example/comp",
        competition_sha256=DIGEST,
        partition_commitment=key_commitment(PARTITION_SECRET),
        identifier_commitment=key_commitment(IDENTIFIER_KEY),
        blinding_commitment=None,
        data_digests={"cosqa": DIGEST},
        host_key_id=DIGEST,
        log_key_id=DIGEST,
    )
    fields.update(changes)
    return e.competition_entry(**fields)


def _participant_history(participant: str, submission: str) -> list[tuple[bytes, EntryCommitter]]:
    """Every kind of entry that names one participant, about one submission (uploaded twice, same archive)."""
    times = (START + timedelta(minutes=minute) for minute in itertools.count(1))
    made = []
    # the team entries last: the tests below pick entries by their place
    kinds = (
        "registration",
        "receipt",
        "receipt",
        "report",
        "report",
        "rejudge",
        "report",
        "outcome",
        "outcome",
        "cancellation",
        "finals",
        "team",
        "team",
    )
    for kind in kinds:
        committer = EntryCommitter.fresh(IDENTIFIER_KEY)
        time = next(times)
        if kind == "registration":
            data = e.registration_entry(committer, time=time, participant=participant, rules_sha256=DIGEST)
        elif kind == "team":  # one team joined and left: its name committed afresh each time
            action = "join" if not any(b'"team"' in d for d, _c in made) else "leave"
            data = e.team_entry(committer, time=time, participant=participant, team=TEAM, action=action)
        elif kind == "receipt":
            data = e.receipt_entry(committer, time=time, participant=participant, submission=submission, upload_sha256=DIGEST)
        elif kind == "report":
            data = e.report_entry(
                committer,
                time=time,
                participant=participant,
                submission=submission,
                attempt=1,
                status="scored",
                payload_sha256=hashlib.sha256(time.isoformat().encode()).hexdigest(),
                envelope_sha256=hashlib.sha256(b"env" + time.isoformat().encode()).hexdigest(),
            )
        elif kind == "outcome":
            data = e.outcome_entry(
                committer, time=time, participant=participant, submission=submission, attempt=3, status="error", failure_code="INFRA"
            )
        elif kind == "rejudge":
            data = e.rejudge_entry(committer, time=time, participant=participant, submission=submission, attempt=2, reason="worker lost")
        elif kind == "cancellation":
            data = e.cancellation_entry(committer, time=time, participant=participant, submission=submission, by="participant")
        else:
            data = e.finals_entry(committer, time=time, participant=participant, submissions=[submission, submission])
        made.append((data, committer))
    return made


def _values(entry: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for name, value in entry.items():
        if name in e.PUBLIC_VOCABULARY_FIELDS:
            continue
        items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        found.update(str(item) for item in items)
    return found


def test_entries_are_canonical_and_decode_to_themselves() -> None:
    data = _entry0()
    assert data == rfc8785.dumps(e.decode_entry(data))
    entry = e.decode_entry(data)
    assert entry["kind"] == "competition" and entry["v"] == 1 and entry["time"] == "2026-12-01T09:00:00Z"
    assert data.startswith(b'{"blinding_commitment":null,"competition_sha256":')
    for other in (
        e.repin_entry(time=START, data_digests={"cosqa": DIGEST}, grader_version="0.2.0", competition_sha256=DIGEST),
        e.board_entry(time=START, part="public", board_sha256=DIGEST),
        e.end_entry(time=START),
        e.retraction_entry(time=START, index=7, admin="alice", reason="entered twice"),
        *(data for data, _committer in _participant_history("p1", "s1")),
    ):
        assert rfc8785.dumps(e.decode_entry(other)) == other
    assert e.end_entry(time=START.astimezone(timezone(timedelta(hours=2)))) == b'{"kind":"end","time":"2026-12-01T09:00:00Z","v":1}'


def test_no_two_entries_of_one_participant_share_a_value() -> None:
    history = [e.decode_entry(data) for data, _committer in _participant_history("participant-1", "submission-9")]
    for first, second in itertools.combinations(history, 2):
        assert not _values(first) & _values(second), (first["kind"], second["kind"])
    # Nor does any entry hold the identifiers themselves.
    assert all(not {"participant-1", "submission-9", DIGEST, TEAM} & _values(entry) for entry in history)


def test_a_participant_opens_their_own_entry_and_anyone_can_after_the_reveal() -> None:
    (data, committer), (other, _) = _participant_history("p1", "s1")[1:3]  # two receipts
    entry = e.decode_entry(data)
    assert e.entry_opens(entry, committer.key, participant="p1", submission="s1", upload=DIGEST)
    assert not e.entry_opens(entry, committer.key, participant="p2")
    assert not e.entry_opens(entry, committer.key, submission="s2")
    # The entry key of one entry opens no other entry of the same participant.
    assert not e.entry_opens(e.decode_entry(other), committer.key, participant="p1")
    # After the reveal: the identifier key gives every entry's key.
    assert e.key_of_entry(IDENTIFIER_KEY, entry) == committer.key == entry_key(IDENTIFIER_KEY, committer.salt)
    assert e.entry_opens(e.decode_entry(other), e.key_of_entry(IDENTIFIER_KEY, e.decode_entry(other)), participant="p1")
    # Field names are bound: a submission commitment does not open as a participant.
    assert commit(committer.key, "participant", "x") != commit(committer.key, "submission", "x")


def test_reveal_is_checked_against_entry_0() -> None:
    entry0 = e.decode_entry(_entry0())
    good = e.reveal_entry(
        time=START,
        partition_secret=PARTITION_SECRET,
        identifier_key=IDENTIFIER_KEY,
        blinding_key=None,
        public_board_sha256=DIGEST,
        private_board_sha256=DIGEST,
    )
    e.check_reveal(entry0, e.decode_entry(good))
    for secret, key, blinding in (
        (b"\x01" * 32, IDENTIFIER_KEY, None),
        (PARTITION_SECRET, new_identifier_key(), None),
        (PARTITION_SECRET, IDENTIFIER_KEY, b"\x02" * 32),
    ):
        bad = e.reveal_entry(
            time=START, partition_secret=secret, identifier_key=key, blinding_key=blinding, public_board_sha256=DIGEST, private_board_sha256=DIGEST
        )
        with pytest.raises(LogVerificationError):
            e.check_reveal(entry0, e.decode_entry(bad))


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind":"end","time":"2026-12-01T09:00:00Z","v":1} ',  # not canonical
        b'{"time":"2026-12-01T09:00:00Z","kind":"end","v":1}',  # keys out of order
        b'{"kind":"end","time":"2026-12-01T09:00:00Z","v":2}',
        b'{"kind":"end","time":"2026-12-01 09:00:00","v":1}',
        b'{"kind":"end","time":"2026-13-01T09:00:00Z","v":1}',
        b'{"extra":1,"kind":"end","time":"2026-12-01T09:00:00Z","v":1}',
        b'{"kind":"scores","time":"2026-12-01T09:00:00Z","v":1}',
        b'{"kind":"end","kind":"end","time":"2026-12-01T09:00:00Z","v":1}',
        b'{"index":-1,"kind":"retraction","admin":"a","reason":"r","time":"2026-12-01T09:00:00Z","v":1}',
        b"[]",
        b"\xff",
    ],
)
def test_malformed_entries_are_refused(data: bytes) -> None:
    with pytest.raises(LogVerificationError):
        e.decode_entry(data)


def test_builders_refuse_bad_values() -> None:
    committer = EntryCommitter.fresh(IDENTIFIER_KEY)
    with pytest.raises(UsageError):
        _entry0(competition_sha256="ABC")
    with pytest.raises(UsageError):
        e.report_entry(
            committer, time=START, participant="p", submission="s", attempt=1, status="great", payload_sha256=DIGEST, envelope_sha256=DIGEST
        )
    for status, code in (("scored", "OOM"), ("failed", "NOT_A_CODE"), ("failed", None)):  # a scored grade has a report; codes are the enum's
        with pytest.raises(UsageError):
            e.outcome_entry(committer, time=START, participant="p", submission="s", attempt=1, status=status, failure_code=code)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        e.end_entry(time=datetime(2026, 12, 1))  # naive time
    with pytest.raises(UsageError):
        e.retraction_entry(time=START, index=1, admin="a", reason="x" * 201)
    with pytest.raises(UsageError):
        e.finals_entry(committer, time=START, participant="p", submissions=[])
