"""Built boards, kept per competition until what they are built from changes.

A board request rebuilt its boards from every graded submission of the competition: on bench/many_competitions.py's
world (2,000 graded submissions a competition) that was 70-100 ms a request, most of it reading those rows and
parsing each one's labels (JSON) to know its board (:func:`grader.hosting.leaderboard.parts.scored_hidden`). The
statistics were cached already; the rows were read again on every request although they rarely change.

A board is a function of:

* which hidden-split submissions are scored, with which current result and its stored part scores;
* the participants (name, team, baseline badge) and their final choices;
* the competition's [leaderboard] section, host key and partition secret (fixed while the server runs);
* what never changes once written: a submission's participant, name, kind, labels and upload time, a result's
  signed report.

So boards built once are served again while :func:`inputs_digest` (one SQL aggregate over the graded submissions,
plus the participants and final choices: about 2 ms on that world) says their inputs are as they were. The digest is
read before the boards are built: a change committed between the two only makes the next request build them again,
never keeps a board older than its digest. Boards with a row whose report was unavailable are not kept (the file
may be restored), so that row is looked for again on the next request, as before.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import String, cast, func, select
from sqlalchemy.orm import Session

from grader.hosting.db.models import FinalChoice, Participant, Result, ResultPart, Submission, Team
from grader.hosting.leaderboard.board import Board, BoardInputs, build_boards
from grader.hosting.leaderboard.caches import CompetitionCache, competition_of
from grader.hosting.states import State, Track
from grader.hosting.visibility import Part

#: Separators of the aggregate's fields and rows: control characters, in no id or number the server writes.
_FIELD, _ROW = "\x1f", "\x1e"
#: A team that is not set (an empty team name is not that), and the end of one table's rows in the digest.
_NONE, _TABLE = "\x1d", b"\x00"

#: Built boards per competition: a part's boards as they stand (public; private after the end) and the one before a
#: change, which a request that read the older digest may still ask for.
_cache: CompetitionCache[tuple[Any, ...], list[Board]] = CompetitionCache(per_competition=4, overall=256)


def _joined(*fields: Any) -> Any:
    """``fields`` as one string, each cast to text, separated by :data:`_FIELD`."""
    text: Any = cast(fields[0], String)
    for field in fields[1:]:
        text = text + _FIELD + cast(field, String)
    return text


def _aggregated(row: Any, *clauses: Any) -> Any:
    """The rows ``row`` of a SELECT as one string (a scalar subquery), separated by :data:`_ROW`, in no set order."""
    return select(func.aggregate_strings(row, _ROW)).select_from(*clauses).scalar_subquery()


def inputs_digest(session: Session) -> bytes:
    """A digest of what a board reads from the database (the module's docstring): equal digests, equal boards.

    One statement, one row back: each table's rows aggregated into a string in SQL (a request on a loaded machine
    pays each round trip to the database again), sorted here (their order there is unspecified). Neither separator
    can be in a value: ids and numbers are the server's, names and teams refuse control characters.
    """
    graded = (
        select(
            func.aggregate_strings(
                _joined(
                    Submission.id,
                    Result.id,
                    ResultPart.public_score,
                    ResultPart.private_score,
                    func.coalesce(ResultPart.full_score, -1.0),
                    func.coalesce(Submission.team_id, -1),
                ),
                _ROW,
            )
        )
        .select_from(Submission)
        .join(Result, Result.id == Submission.result_id)
        .join(ResultPart, ResultPart.result_id == Result.id)
        .where(Submission.track == Track.HIDDEN, Submission.state == State.SCORED)
        .scalar_subquery()
    )
    people = _aggregated(_joined(Participant.id, Participant.name, func.coalesce(Participant.team, _NONE), Participant.is_baseline), Participant)
    finals = _aggregated(_joined(FinalChoice.participant_id, FinalChoice.submission_id), FinalChoice)
    # a team's row is named by its team (its submissions say which: their team_id, above)
    team_names = _aggregated(_joined(Team.id, Team.name), Team)
    found = session.execute(select(graded, people, finals, team_names)).one()
    digest = hashlib.sha256()
    for text in found:
        digest.update(_ROW.join(sorted((text or "").split(_ROW))).encode("utf-8") + _TABLE)
    return digest.digest()


def _settings(inputs: BoardInputs) -> tuple[Any, ...]:
    """What of ``inputs`` a board depends on besides the host key (which names the competition in the cache); the phase
    too, whose window chooses the submissions ranked."""
    return (inputs.secret, inputs.fraction, inputs.finals_k, inputs.resamples, inputs.seed, inputs.ladder, inputs.ladder_step, inputs.phase)


def cached_boards(session: Session, part: Part, inputs: BoardInputs, database: str) -> list[Board]:
    """:func:`build_boards` of ``part``, built again only when :func:`inputs_digest` changed. The boards returned
    may be shared with other requests: read them, never change them.

    ``database``: the competition's database URL (two tests' competitions may share a host key, never a database).
    """
    competition = competition_of(inputs.public_key)
    key = (database, part, inputs_digest(session), _settings(inputs))
    found = _cache.get(competition, key)
    if found is not None:
        return found
    built = build_boards(session, part, inputs)
    if all(entry.unavailable is None for board in built for entry in board.entries):
        _cache.put(competition, key, built)
    return built
