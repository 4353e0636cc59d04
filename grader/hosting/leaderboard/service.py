"""What the routes and pages of the leaderboard ask for, decided in one place.

The rule of every function here: before the end, only public-part aggregates
(rounded to 4 decimals) leave the server, never a private number, a full-split
number or a per-query value; after the end the private board, full scores and
full reports appear and the partition secret is published.
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any

from sqlalchemy import and_, delete, select

from grader.hosting.clock import iso, utcnow
from grader.hosting.config import Phase, choosing_phase
from grader.hosting.context import ServerContext
from grader.hosting.db.models import FinalChoice, Pin, Result, ResultPart, Submission
from grader.hosting.errors import HostingError, NotPublished
from grader.hosting.identity import teams
from grader.hosting.identity.principal import Principal
from grader.hosting.leaderboard.board import Board, BoardInputs, finals_of, ladder_replay, owner_key, readable, scored_rows, setting_of
from grader.hosting.leaderboard.built import cached_boards
from grader.hosting.leaderboard.parts import stored_parts
from grader.hosting.leaderboard.values import UNAVAILABLE, readable_values, signed_part_scores
from grader.hosting.protocol.messages import BoardEntry, Boards, BoardView, Comparison
from grader.hosting.schedule import has_ended, is_disclosed
from grader.hosting.states import State, Track
from grader.hosting.visibility import Download, Part, board_visible, proof_download, report_download
from grader.reports.signing import ENVELOPE_NAME

DECIMALS = 4
log = logging.getLogger("grader.hosting")


def rounded(value: float | None) -> float | None:
    """A published number: rounded to 4 decimals."""
    return None if value is None else round(float(value), DECIMALS)


def _board_inputs(ctx: ServerContext, phase: Phase | None = None) -> BoardInputs:
    return BoardInputs.of(ctx.competition, ctx.signing_key.public_key(), ctx.partition_secret, phase)


def _public(ctx: ServerContext, phase: Phase | None) -> bool:
    """Whether ``phase``'s (or, for None, the competition's) test data is public: every number disclosed at once."""
    return ctx.competition.in_phase(phase).public_data


def _disclosed_for(ctx: ServerContext, submission: Submission, ended: bool) -> bool:
    """Whether every number of ``submission`` is public: the competition's disclosure, or its phase's public test data."""
    return ended or (submission.track == Track.HIDDEN and ctx.competition.rules_at(submission.uploaded_at).public_data)


def board_public_data(ctx: ServerContext, named: str | None) -> bool:
    """Whether the test data of the board asked for (``named`` phase, or the default one) is public."""
    return _public(ctx, board_phase(ctx, named))


def board_phase(ctx: ServerContext, named: str | None) -> Phase | None:
    """The phase whose board is asked for: ``named``, else the reader's default (:meth:`Competition.board_phase`);
    :class:`NotPublished` for a name the competition does not have (the routes answer 404)."""
    if named is None:
        return ctx.competition.board_phase(utcnow())
    phase = ctx.competition.phase_named(named)
    if phase is None:
        raise NotPublished(f"no phase {named!r} in this competition")
    return phase


def board_part(part: str) -> Part:
    """``part`` as a :class:`Part` (:class:`HostingError` for anything else)."""
    try:
        return Part(part)
    except ValueError:
        raise HostingError(f"no such board part: {part!r}") from None


def boards(ctx: ServerContext, part: Part | str, *, ended: bool, phase: Phase | None = None) -> list[Board]:
    """The boards of ``part`` (of ``phase``'s submissions, for a competition of phases); the private part only after the
    end (:class:`NotPublished` before: the routes answer 404).

    Built again only when what they are built from changed (:mod:`grader.hosting.leaderboard.built`): read them, never
    change them."""
    part = board_part(part)
    public_data = ctx.competition.in_phase(phase).public_data  # a phase's own test data
    if not board_visible(part, ended=ended or public_data, public_data=public_data):
        if part == Part.FULL:
            raise NotPublished("the full leaderboard is published over public test data only; this competition's is hidden")
        raise NotPublished("the private leaderboard is published at the end of the competition")
    with ctx.db.session() as session:
        return cached_boards(session, part, _board_inputs(ctx, phase), ctx.db.url)


def entry_json(entry: Any, *, ended: bool = False) -> BoardEntry:
    """One row as published (numbers rounded); its report link only where the report route serves one (visibility rule)."""
    labels = entry.labels
    facts = labels.get("model") if isinstance(labels.get("model"), dict) else {}
    training = labels.get("training") if isinstance(labels.get("training"), dict) else {}
    vs = entry.vs_above
    identity = {
        "participant": entry.participant,
        "team": entry.team,
        "baseline": entry.baseline,
        "submission": entry.submission_id,
        "name": entry.name,
        "kind": entry.kind,
        "setting": entry.setting,
        "training_data": training.get("datasets"),
        "model": facts,
        "final": entry.final,
        # the released contamination figure of the row's signed report (None, and so absent, when it carried no sketch)
        "contamination": entry.contamination,
        # CPU seconds per 1,000 queries, the grading worker's word (None, and so absent, without a cost block)
        "cpu_s_per_1000_queries": rounded(entry.cost),
        # a team's row names its submission's maker after the end only: before it, the board names nobody a team hides
        "made_by": entry.made_by if ended else None,
    }
    if entry.unavailable is not None:
        # its signed report cannot be read: no number can be derived, and none is shown; the link stays, so that
        # `grader log audit --board` names the report it could not check (the route answers 404 for it)
        return BoardEntry(
            **{
                "rank": None,
                "rank_interval": None,
                "group": None,
                **identity,
                "score": None,
                "ladder": entry.ladder,
                "interval": [None, None],
                "tasks": {},
                "vs_above": None,
                "date": iso(entry.uploaded_at),
                # the link follows grader.hosting.visibility.report_download, as on any row
                "report": None if entry.ladder and not ended else f"/api/v1/leaderboard/reports/{entry.submission_id}",
                "unavailable": entry.unavailable,
            }
        )
    if entry.released is not None:
        # Ladder mode: only the released score and the rank; finer numbers of the public part would undo the Ladder
        return BoardEntry(
            **{
                "rank": entry.rank,
                "rank_interval": None,
                "group": None,
                **identity,
                "score": rounded(entry.released),
                "ladder": True,
                "interval": [None, None],
                "tasks": {},
                "vs_above": None,
                "date": iso(entry.uploaded_at),
                # the link follows grader.hosting.visibility.report_download: none in Ladder mode until the end
                "report": f"/api/v1/leaderboard/reports/{entry.submission_id}" if ended else None,
            }
        )
    return BoardEntry(
        **{
            "rank": entry.rank,
            "rank_interval": None if entry.rank is None else [entry.rank_low, entry.rank_high],
            "group": entry.group,
            **identity,
            "score": rounded(entry.score),
            "ladder": False,
            "interval": [rounded(entry.ci_low), rounded(entry.ci_high)],
            "tasks": {t: rounded(v) for t, v in sorted(entry.tasks.items())},
            "vs_above": None
            if vs is None
            else Comparison(
                submission=vs["submission"],
                difference=rounded(vs["difference"]),
                effect_size=rounded(vs["effect_size"]),
                t_p_holm=rounded(vs["t_p_holm"]),
                randomization_p_holm=rounded(vs["randomization_p_holm"]),
            ),
            "date": iso(entry.uploaded_at),
            "report": f"/api/v1/leaderboard/reports/{entry.submission_id}",
        }
    )


def boards_json(found: list[Board], *, competition: str, part: Part, ended: bool) -> Boards:
    """Boards as published (numbers rounded). The JSON names no phase (the request did, or took the default: ``GET
    /api/v1/competition`` says which phase is open): a board's bytes stay what they were, which a logged reveal hashed."""
    return Boards(
        competition=competition,
        part=part,
        ended=ended,
        host_key="/host-key.pub",
        boards=[BoardView(setting=b.setting, title=b.title, method=b.method, entries=[entry_json(e, ended=ended) for e in b.entries]) for b in found],
    )


def board_json(ctx: ServerContext, part: Part | str | None, *, ended: bool | None = None, phase: str | None = None) -> Boards:
    """The boards of ``part`` as published (:class:`NotPublished`: the private part before the end); ``part`` None: the
    reader's default (:func:`grader.hosting.visibility.default_part`: the full board over public data, else the public one).

    ``ended``: whether every number is disclosed, as the request read it (None: read here, once)."""
    if ended is None:
        ended = is_disclosed(ctx.db, ctx.competition)
    chosen = board_phase(ctx, phase)
    ended = ended or ctx.competition.in_phase(chosen).public_data  # a phase over public data discloses all, at once
    if part is None:
        part = Part.FULL if ctx.competition.in_phase(chosen).public_data else Part.PUBLIC
    found = boards(ctx, part, ended=ended, phase=chosen)
    return boards_json(found, competition=ctx.competition.name, part=board_part(part), ended=ended)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A CSV cell that no spreadsheet reads as a formula (OWASP: prefix ' to cells starting = + - @ tab CR).

    Booleans are ``true``/``false`` (as in the JSON), an absent value an empty cell.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def board_csv(ctx: ServerContext, part: Part | str | None, phase: str | None = None) -> str:
    """The boards of ``part`` as CSV, one row per entry; the first column says which part (public or private) it scores."""
    data = board_json(ctx, part, phase=phase)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    tasks = sorted({t for b in data.boards for e in b.entries for t in e.tasks})
    writer.writerow(
        [
            "part",
            "board",
            "rank",
            "rank_low",
            "rank_high",
            "group",
            "participant",
            "team",
            "baseline",
            "submission",
            "name",
            "setting",
            "score",
            "ci_low",
            "ci_high",
            *tasks,
            "date",
            # last, so that the columns before them keep their places for readers of older exports
            "contamination",
            # CPU seconds per 1,000 queries: the grading worker's word (its signed report's cost block), empty without one
            "cpu_s_per_1000_queries",
        ]
    )
    for board in data.boards:
        for e in board.entries:
            interval: list[int | None] = [*e.rank_interval] if e.rank_interval else [None, None]
            row = [
                data.part,
                board.setting,
                e.rank,
                *interval,
                e.group,
                e.participant,
                e.team,
                e.baseline,
                e.submission,
                e.name,
                e.setting,
                e.score,
                *e.interval,
                *[e.tasks.get(t) for t in tasks],
                e.date,
                e.contamination,
                e.cpu_s_per_1000_queries,
            ]
            writer.writerow([csv_cell(v) for v in row])
    return out.getvalue()


def partition_info(ctx: ServerContext, *, ended: bool | None = None) -> dict[str, Any]:
    """The commitments and data digests (from day one); the partition secret and the blinding key once the competition has
    ended (``ended``: as the request read it; None: read here)."""
    with ctx.db.session() as session:
        pin = session.get(Pin, ctx.pin_id)
        assert pin is not None
        digests = pin.digests
    if ended is None:
        ended = has_ended(ctx.db, ctx.competition)
    return {
        "commitment": ctx.partition_commitment,
        "commitment_of": "hex SHA-256 of the secret's bytes",
        "public_fraction": ctx.competition.leaderboard.public_fraction,
        "rule": "docs/statistics.md (Public and private queries); docs/leaderboard.md",
        "data_digests": digests,
        "ended": ended,
        "secret": ctx.partition_secret.hex() if ended else None,
        "blinding": blinding_info(ctx, ended=ended),
    }


def blinding_info(ctx: ServerContext, *, ended: bool) -> dict[str, Any] | None:
    """The blinding key's id and scheme (from day one; every report names the id); the key itself once the competition has ended."""
    key = ctx.blinding_key
    if key is None:
        return None
    return {
        **key.report(),
        "key_id_of": 'hex SHA-256 of "grader blinding key v1", a zero byte, then the key\'s bytes',
        "rule": "docs/protocol.md (What the container sees)",
        "key": key.secret.hex() if ended else None,
    }


#: A submission's result and its part scores, as one query read them for a whole list (:func:`submission_scores`).
Loaded = tuple[Result | None, ResultPart | None]


def submission_scores(ctx: ServerContext, submission: Submission, *, ended: bool, loaded: Loaded | None = None) -> dict[str, Any]:
    """A participant's own scores of a submission: the public part (rounded) until the end; then also private and full.

    Every number is computed from the result's signed report (cached by its path), never read from the database's copy
    of it, so that what a participant is shown is what their signed, logged report says; a report that cannot be read
    shows no score (``report unavailable``). ``loaded``: the submission's current result and part scores, read by the
    caller with the submission (a list of forty then costs one query, not eighty); None: read here.
    """
    if submission.result_id is None:
        return {"score": None}
    if loaded is None:
        with ctx.db.session() as session:
            result = session.get(Result, submission.result_id)
            parts = stored_parts(session, submission.result_id) if submission.track == Track.HIDDEN else None
    else:
        result, parts = loaded
        parts = parts if submission.track == Track.HIDDEN else None
    if result is None or result.envelope_path is None:
        return {"score": None}
    if submission.track != Track.HIDDEN:
        # a sample run is graded on the public sample split: its whole score is public, the report's own aggregate
        signed = readable_values(result.envelope_path, ctx.signing_key.public_key())
        score = None if signed is None else signed.report["aggregate"].get("score")
        return {"score": rounded(score) if isinstance(score, (int, float)) else None}
    if parts is None or submission.state != State.SCORED:  # no part scores: not a scored grade, or a report without per-query values
        return {"score": None}
    scored = signed_part_scores(result.envelope_path, ctx.signing_key.public_key(), ctx.partition_secret, ctx.competition.leaderboard.public_fraction)
    if scored is None:
        return {"score": None, "part": UNAVAILABLE}
    view: dict[str, Any] = {"score": rounded(scored[Part.PUBLIC]["score"]), "part": Part.PUBLIC.value}
    if ctx.competition.rules_at(submission.uploaded_at).leaderboard.ladder and not ended:  # its phase's Ladder
        with ctx.db.session() as session:
            view.update(score=rounded(ladder_score(ctx, session, submission)), part="public (Ladder: released score)")
    if ended:
        view.update(private_score=rounded(scored[Part.PRIVATE]["score"]), full_score=rounded(scored["full"]["score"]))
    return view


def ladder_score(ctx: ServerContext, session: Any, submission: Submission) -> float | None:
    """Ladder mode: the public score the Ladder released after ``submission`` (its participant's, same training setting);
    None when a report of the replay is unavailable (every later released score depends on it)."""
    setting = setting_of(submission.labels)
    phase = ctx.competition.phase_at(submission.uploaded_at)  # the Ladder of the submission's phase, over its entries only
    owner = owner_key(submission.participant_id, submission.team_id)  # a team's submissions replay as one row's
    rows = [
        r
        for r in scored_rows(session)
        if r.participant.id == owner and setting_of(r.submission.labels) == setting and (phase is None or phase.holds(r.submission.uploaded_at))
    ]
    inputs = _board_inputs(ctx, phase)
    ok, lost = readable(rows, inputs)
    return None if lost else ladder_replay(ok, inputs)[0].get(submission.id)


def _row_scope(session: Any, participant_id: int) -> tuple[int, Any]:
    """The key of the caller's board row (:func:`owner_key`) and which submissions are that row's: their team's,
    or their own made outside any team. A team shares its final choices: any member chooses for the row."""
    team = teams.team_of(session, participant_id)
    if team is not None:
        return owner_key(participant_id, team), Submission.team_id == team
    return participant_id, and_(Submission.participant_id == participant_id, Submission.team_id.is_(None))


def own_finals(ctx: ServerContext, participant: Principal) -> tuple[set[str], bool]:
    """The final submissions of the caller's row (theirs, or their team's) and whether they were chosen (False: the
    default, best public ones)."""
    with ctx.db.session() as session:
        owner, scope = _row_scope(session, participant.id)
        chosen = set(
            session.scalars(select(FinalChoice.submission_id).join(Submission, Submission.id == FinalChoice.submission_id).where(scope)).all()
        )
        # the phase chosen in now: the last one's choices are the final ones; an earlier one's are carried to the next
        phase = choosing_phase(ctx.competition.phases, utcnow())
        rows = [r for r in scored_rows(session) if r.participant.id == owner and (phase is None or phase.holds(r.submission.uploaded_at))]
        finals = finals_of(session, rows, ctx.competition.leaderboard.finals).get(owner, set())
    return finals, bool(chosen & finals)


def set_finals(ctx: ServerContext, participant: Principal, submission_ids: list[str]) -> list[str]:
    """Replace the final choices of the caller's row (their own, or their team's: hidden, scored; at most K; before the end)."""
    k = ctx.competition.leaderboard.finals
    if has_ended(ctx.db, ctx.competition):
        raise HostingError("final choices closed with the competition's end")
    ids = sorted(set(submission_ids))
    phase = choosing_phase(ctx.competition.phases, utcnow())
    if len(ids) > k:
        raise HostingError(f"at most {k} final submissions may be chosen ({len(ids)} given)")
    now = utcnow()
    with ctx.db.session() as session:
        _owner, scope = _row_scope(session, participant.id)
        for sid in ids:
            submission = session.scalar(select(Submission).where(Submission.id == sid, scope)) if len(sid) <= 40 else None
            if submission is None:
                raise LookupError(sid)
            if submission.track != Track.HIDDEN or submission.state != State.SCORED:
                raise HostingError("only scored hidden-split submissions can be final")
            if phase is not None and not phase.holds(submission.uploaded_at):
                raise HostingError(f"choices are taken now among the submissions of phase {phase.name!r}: {sid} was submitted in another phase")
        row = select(Submission.id).where(scope)
        if phase is not None:  # the choices of another phase stay (those an earlier phase carried, for the record)
            row = row.where(Submission.uploaded_at >= phase.start, *([Submission.uploaded_at < phase.end] if phase.end is not None else []))
        session.execute(delete(FinalChoice).where(FinalChoice.submission_id.in_(row)))
        for sid in ids:
            session.add(FinalChoice(submission_id=sid, participant_id=participant.id, chosen_at=now))
    return ids


def report_envelope(ctx: ServerContext, submission: Submission, *, ended: bool | None = None) -> bytes | None:
    """The signed report a participant may download (the rule: :func:`grader.hosting.visibility.report_download`):
    the full report, or the public-part report signed at acceptance; None when there is none to download, or when its
    file cannot be read (logged with its path: the operator restores it). Reads only; ``ended`` None: read here."""
    found = _result_of(ctx, submission)
    if found is None:
        return None
    if ended is None:
        ended = is_disclosed(ctx.db, ctx.competition)
    ended = _disclosed_for(ctx, submission, ended)
    download = report_download(
        track=submission.track, result_state=found.state, ended=ended, ladder=ctx.competition.rules_at(submission.uploaded_at).leaderboard.ladder
    )
    return _read_envelope(ctx, found, download)


def proved_envelope(ctx: ServerContext, submission: Submission) -> bytes | None:
    """The signed report whose log entry a participant gets the inclusion proof of (the rule:
    :func:`grader.hosting.visibility.proof_download`): the one they may download, or a hidden grade's withheld full
    report, whose bytes never leave the server here (only its entry's digests, public in the log anyway)."""
    found = _result_of(ctx, submission)
    if found is None:
        return None
    ended = _disclosed_for(ctx, submission, is_disclosed(ctx.db, ctx.competition))
    download = proof_download(
        track=submission.track, result_state=found.state, ended=ended, ladder=ctx.competition.rules_at(submission.uploaded_at).leaderboard.ladder
    )
    return _read_envelope(ctx, found, download)


def _result_of(ctx: ServerContext, submission: Submission) -> Result | None:
    """The submission's current result if it has a signed report."""
    if submission.result_id is None:
        return None
    with ctx.db.session() as session:
        result = session.get(Result, submission.result_id)
    return None if result is None or result.envelope_path is None else result


def _read_envelope(ctx: ServerContext, result: Result, download: Download) -> bytes | None:
    """The bytes of ``download`` of ``result``; None for none, or a file that cannot be read (logged with its path)."""
    if download is Download.NONE:
        return None
    assert result.envelope_path is not None
    # the public part is beside the result's own report (a re-scoring's too); absent for a report whose parts could not be
    # scored (no per-query values): there is no public part to give
    path = Path(result.envelope_path) if download is Download.FULL else ctx.state.public_part_of(result.envelope_path) / ENVELOPE_NAME
    try:
        return path.read_bytes()
    except FileNotFoundError:
        if download is Download.FULL:
            log.error("report unavailable: %s is missing", path)
        return None
    except OSError as error:
        log.error("report unavailable: %s: %s", path, error)
        return None


def entry_report(ctx: ServerContext, submission_id: str) -> bytes | None:
    """The signed report of a board entry (public board; the private one too after the end); None if not an entry, none
    to show, or its report unavailable (the row says so)."""
    ended = is_disclosed(ctx.db, ctx.competition)
    entries = {
        e.submission_id
        for part in Part
        for phase in ctx.competition.phases or (None,)
        if board_visible(part, ended=ended or _public(ctx, phase), public_data=_public(ctx, phase))
        for b in boards(ctx, part, ended=ended or _public(ctx, phase), phase=phase)
        for e in b.entries
        if e.unavailable is None
    }
    if submission_id not in entries:
        return None
    with ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
    return None if submission is None else report_envelope(ctx, submission, ended=ended)
