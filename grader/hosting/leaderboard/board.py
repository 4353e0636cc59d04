"""The leaderboard, computed on the server from stored results: one row per participant, per training setting.

A team's submissions (made while their maker was a member) form one row under the team's name, whoever made
them (docs/hosting.md, "Teams"): the row's owner is the team (:func:`owner_key`), not a participant.

* Public board (any time): each participant's best public-part score.
* Private board (after the end only): each participant's best private-part
  score among their final choices (default: their ``finals`` best public ones).
* Zero-shot, fine-tuned and undeclared-training entries are ranked on separate
  boards; host baselines are shown with a badge and never ranked.
* Statistics (:func:`grader.stats.compare.compare`) over the per-query values of
  the board's part: bootstrap interval, rank interval, significance group (not
  separable from the leader), and each entry's paired tests against the entry
  ranked just above it, Holm-corrected over all pairs of the board.
* Every number a row shows (score, task means, intervals, comparisons) is computed from the
  per-query values of its signed report, never read from the database's copy of them: a
  database edit cannot change what is shown (docs/transparency.md). Which submission is a
  participant's row is chosen with the part scores stored at acceptance.
* A row whose report cannot be read shows no number and says so (``unavailable``); the rest of
  the board is built as usual.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.hosting.config import Competition, Phase
from grader.hosting.db.models import FinalChoice, Participant, Team
from grader.hosting.leaderboard.caches import CompetitionCache, competition_of
from grader.hosting.leaderboard.parts import CurrentResult, GradedSubmission, StoredParts, scored_hidden
from grader.hosting.leaderboard.values import UNAVAILABLE, PerQuery, part_values, partitions, readable_values
from grader.hosting.visibility import Part
from grader.integrity.release import ReleasedOverlap
from grader.stats.aggregate import ScoreTable
from grader.stats.compare import Comparison, compare
from grader.stats.ladder import ladder_step as ladder_step_of

SETTINGS = ("zero-shot", "fine-tuned", "undeclared")
SETTING_TITLES = {"zero-shot": "Zero-shot", "fine-tuned": "Fine-tuned", "undeclared": "Training data not declared"}


@dataclass
class Entry:
    """One row of a board."""

    submission_id: str
    participant: str
    team: str | None
    baseline: bool
    name: str
    kind: str
    setting: str
    labels: dict[str, Any]
    uploaded_at: datetime
    #: None only for a row whose report is unavailable
    score: float | None
    tasks: dict[str, float]
    final: bool = False
    rank: int | None = None
    rank_low: int | None = None
    rank_high: int | None = None
    group: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    vs_above: dict[str, Any] | None = None
    #: Ladder mode: the public score the Ladder released (shown instead of the raw public score)
    released: float | None = None
    #: why the row shows no number (its signed report cannot be read); None for every other row
    unavailable: str | None = None
    #: a row of a Ladder board (the released score stands for ``released`` being set, except on an unavailable row)
    ladder: bool = False
    #: the released contamination figure of its signed report (:func:`contamination_of`); None when it carried no sketch
    contamination: str | None = None
    #: CPU seconds per 1,000 queries of its signed report's cost block (:func:`cost_of`: a hosted worker's word); None without
    cost: float | None = None
    #: a team's row: the member who made the submission (the name its log entries commit); None on a participant's row
    made_by: str | None = None


@dataclass
class Board:
    """The rows of one training setting, ranked entries first (best first), then baselines."""

    part: str
    setting: str
    entries: list[Entry] = field(default_factory=list)
    method: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return SETTING_TITLES[self.setting]


def setting_of(labels: dict[str, Any] | None) -> str:
    """``zero-shot`` or ``fine-tuned`` as declared; anything else is ``undeclared`` (never assumed zero-shot)."""
    training = (labels or {}).get("training") or {}
    setting = training.get("setting") if isinstance(training, dict) else None
    return setting if setting in ("zero-shot", "fine-tuned") else "undeclared"


@dataclass(frozen=True)
class BoardInputs:
    """What a board is built with besides the database: the host key, the partition secret and the competition's [leaderboard] section."""

    public_key: Ed25519PublicKey
    secret: bytes = field(repr=False)
    fraction: float
    finals_k: int
    resamples: int
    seed: int
    ladder: bool = False
    ladder_step: float | None = None
    #: The phase whose board this is: only its submissions (uploaded within its window) are ranked; None: all of them
    phase: Phase | None = None

    @classmethod
    def of(cls, competition: Competition, public_key: Ed25519PublicKey, secret: bytes, phase: Phase | None = None) -> BoardInputs:
        """What ``competition``'s boards are built with: its [leaderboard] section (``phase``'s, for a phase's board), the
        host key and the partition secret."""
        lb = competition.in_phase(phase).leaderboard
        return cls(public_key, secret, lb.public_fraction, lb.finals, lb.resamples, lb.seed, lb.ladder, lb.ladder_step, phase)


@dataclass(frozen=True)
class Owner:
    """Whose row a submission counts for: a participant, or a team (its ``id`` then :func:`owner_key`'s negative one)."""

    id: int
    name: str
    team: str | None
    is_baseline: bool


def owner_key(participant_id: int, team_id: int | None) -> int:
    """The key of a submission's row: its team's (negative, so never a participant's id), else its participant's."""
    return -team_id if team_id is not None else participant_id


@dataclass(frozen=True)
class Scored:
    submission: GradedSubmission
    result: CurrentResult
    parts: StoredParts
    #: the row's owner: the participant, or the team the submission was made for
    participant: Owner
    #: the name of the participant who made the submission (the owner's, unless the row is a team's)
    maker: str = ""


def scored_rows(session: Session) -> list[Scored]:
    """Every scored hidden-split submission with the part scores stored at its acceptance, and its row's owner.

    A result whose parts could not be scored (a report without per-query values) has none and is left out.
    """
    owners = {p.id: Owner(p.id, p.name, p.team, p.is_baseline) for p in session.scalars(select(Participant)).all()}
    owners.update({-t.id: Owner(-t.id, t.name, None, False) for t in session.scalars(select(Team)).all()})
    return [
        Scored(submission, result, parts, owners[owner_key(submission.participant_id, submission.team_id)], owners[submission.participant_id].name)
        for submission, result, parts in scored_hidden(session)
    ]


def finals_of(session: Session, rows: list[Scored], k: int) -> dict[int, set[str]]:
    """Each row owner's final submissions: their choices, or by default their ``k`` best public ones (ties: earliest).

    A choice counts for the row of the submission chosen (a team's: whichever member chose it).
    """
    owner_of = {row.submission.id: row.participant.id for row in rows}
    chosen: dict[int, set[str]] = {}
    for choice in session.scalars(select(FinalChoice)).all():
        if choice.submission_id in owner_of:
            chosen.setdefault(owner_of[choice.submission_id], set()).add(choice.submission_id)
    scored_ids = set(owner_of)
    by_participant: dict[int, list[Scored]] = {}
    for row in rows:
        by_participant.setdefault(row.participant.id, []).append(row)
    finals: dict[int, set[str]] = {}
    for pid, own in by_participant.items():
        picked = {sid for sid in chosen.get(pid, set()) if sid in scored_ids}
        if not picked:
            best = sorted(own, key=lambda r: (-r.parts.public_score, r.submission.uploaded_at, r.submission.id))[:k]
            picked = {r.submission.id for r in best}
        finals[pid] = picked
    return finals


def _best(rows: list[Scored], part: Part) -> Scored:
    columns = {Part.PUBLIC: lambda r: r.parts.public_score, Part.PRIVATE: lambda r: r.parts.private_score, Part.FULL: lambda r: r.parts.full_score}
    score: Callable[[Scored], float] = columns[part]
    return sorted(rows, key=lambda r: (-score(r), r.submission.uploaded_at, r.submission.id))[0]


def select_entries(rows: list[Scored], part: Part, finals: dict[int, set[str]]) -> list[Scored]:
    """One row per participant: the best public (or full) score, or (private) the best private score among the finals."""
    by_participant: dict[int, list[Scored]] = {}
    for row in rows:
        if part == Part.PRIVATE and row.submission.id not in finals.get(row.participant.id, set()):
            continue
        by_participant.setdefault(row.participant.id, []).append(row)
    return [_best(own, part) for own in by_participant.values()]


#: A board's statistics (seconds of resampling each), per competition: one per part, training setting and ranked or
#: baseline rows, for the entries it was computed over (a new result makes a new key; the old one ages out).
_cache: CompetitionCache[tuple[Any, ...], Comparison] = CompetitionCache(per_competition=64, overall=1024)


def _comparison(competition: bytes, key: tuple[Any, ...], table: ScoreTable, resamples: int, seed: int) -> Comparison:
    found = _cache.get(competition, key)
    if found is None:
        found = compare(table, resamples=resamples, seed=seed)
        _cache.put(competition, key, found)
    return found


def _values(row: Scored, inputs: BoardInputs, part: str) -> tuple[str, dict[str, list[str]], PerQuery]:
    assert row.result.envelope_path is not None
    signed = readable_values(row.result.envelope_path, inputs.public_key)
    assert signed is not None, "rows are split by readable() first"
    return signed.measure, signed.groups, part_values(signed.values, partitions(inputs.secret, signed.values, inputs.fraction), part)


def contamination_of(report: Mapping[str, Any]) -> str | None:
    """The released contamination figures a signed report carries, one line per task (the release rule's own words); None without.

    Only what :mod:`grader.integrity.release` released is in the report: the board adds nothing to it.
    """
    block = report.get("contamination")
    if not isinstance(block, dict):
        return None
    lines = [ReleasedOverlap(t["task"], t["split"], t["test_queries"], t["step"], t["touched"]).line() for t in block["tasks"]]
    return "; ".join(lines)


def _contamination(row: Scored, inputs: BoardInputs) -> str | None:
    assert row.result.envelope_path is not None
    signed = readable_values(row.result.envelope_path, inputs.public_key)
    return None if signed is None else contamination_of(signed.report)


def cost_of(report: Mapping[str, Any]) -> float | None:
    """The cost column of a signed report: its ``cost.total.cpu_s_per_1000_queries``; None without a cost block or the figure.

    The figure is what the grading worker measured (its word, bounded and checked by the server: docs/reports.md,
    The cost block); it varies between re-grades and never enters a rank or a statistic.
    """
    block = report.get("cost")
    total = block.get("total") if isinstance(block, dict) else None
    figure = total.get("cpu_s_per_1000_queries") if isinstance(total, dict) else None
    return float(figure) if isinstance(figure, (int, float)) and not isinstance(figure, bool) else None


def _cost(row: Scored, inputs: BoardInputs) -> float | None:
    assert row.result.envelope_path is not None
    signed = readable_values(row.result.envelope_path, inputs.public_key)
    return None if signed is None else cost_of(signed.report)


def readable(rows: list[Scored], inputs: BoardInputs) -> tuple[list[Scored], list[Scored]]:
    """``rows`` split into those whose signed report reads and verifies, and those whose report is unavailable."""
    ok: list[Scored] = []
    lost: list[Scored] = []
    for row in rows:
        path = row.result.envelope_path
        (ok if path is not None and readable_values(path, inputs.public_key) is not None else lost).append(row)
    return ok, lost


def _entry(row: Scored, setting: str, finals: dict[int, set[str]], score: float | None, tasks: Mapping[str, float], **extra: Any) -> Entry:
    """A board row of ``row``: who and what it is, its score and task means, and whether it is a final; ``extra``: the rest."""
    return Entry(
        row.submission.id,
        row.participant.name,
        row.participant.team,
        row.participant.is_baseline,
        row.submission.name,
        row.submission.kind,
        setting,
        dict(row.submission.labels or {}),
        row.submission.uploaded_at,
        score,
        dict(tasks),
        final=row.submission.id in finals.get(row.participant.id, set()),
        made_by=row.maker if row.participant.id < 0 else None,  # a team's row (owner_key: negative)
        **extra,
    )


def unavailable_entry(row: Scored, setting: str, finals: dict[int, set[str]], *, ladder: bool) -> Entry:
    """The row of a submission whose signed report is unavailable: who and what, but no number (none can be derived)."""
    return _entry(row, setting, finals, None, {}, unavailable=UNAVAILABLE, ladder=ladder)


#: What the tie key hashes before the submission id (a purpose of its own under the partition secret).
LADDER_TIE_CONTEXT = b"grader ladder tie order v1\x00"


def ladder_tie_key(secret: bytes, submission_id: str) -> bytes:
    """HMAC-SHA256 under the partition secret of a submission id: where it goes among equal released scores.

    A stable sort would keep the raw public order among ties, the finer information the
    Ladder's rounding exists to withhold. The key is recomputable by anyone once the secret is
    revealed, and no participant influences it (the server chooses submission ids).
    """
    return hmac.new(secret, LADDER_TIE_CONTEXT + submission_id.encode("utf-8"), hashlib.sha256).digest()


def released_order(entries: list[Entry], secret: bytes) -> list[Entry]:
    """Ladder-mode entries best released score first, ties ordered by :func:`ladder_tie_key` (never by raw score)."""
    return sorted(entries, key=lambda e: (-(e.released or 0.0), ladder_tie_key(secret, e.submission_id)))


def ladder_replay(rows: list[Scored], inputs: BoardInputs) -> tuple[dict[str, float], dict[str, float]]:
    """Ladder mode: (the score released after each submission, by id; each participant's released best, by id).

    Each participant's submissions of one training setting are replayed in upload
    order through :func:`grader.stats.ladder.ladder_step` over their public per-query values.
    """
    after: dict[str, float] = {}
    best: dict[str, float] = {}
    by_participant: dict[int, list[Scored]] = {}
    for row in rows:
        by_participant.setdefault(row.participant.id, []).append(row)
    for own in by_participant.values():
        own.sort(key=lambda r: (r.submission.uploaded_at, r.submission.id))
        loaded = [_values(r, inputs, Part.PUBLIC) for r in own]
        table = ScoreTable.from_values([r.submission.id for r in own], loaded[0][0], [v for _, _, v in loaded], loaded[0][1])
        best_values = released = best_id = None
        for index, row in enumerate(own):
            outcome = ladder_step_of(table.values[index], table.layout, best_values, released, step=inputs.ladder_step)
            if outcome.improved:
                best_values, released, best_id = table.values[index], outcome.released, row.submission.id
            after[row.submission.id] = outcome.released
        assert best_id is not None and released is not None
        best[best_id] = released
    return after, best


def build_boards(session: Session, part: Part, inputs: BoardInputs) -> list[Board]:
    """The boards of ``part`` (``public``, or ``private`` which the caller shows only after the end), one per training setting;
    of ``inputs.phase``'s submissions only, when it names a phase."""
    rows = [r for r in scored_rows(session) if inputs.phase is None or inputs.phase.holds(r.submission.uploaded_at)]
    finals = finals_of(session, rows, inputs.finals_k)
    boards = []
    for setting in SETTINGS:
        in_setting = [r for r in rows if setting_of(r.submission.labels) == setting]
        released: dict[str, float] = {}
        ladder = inputs.ladder and part == Part.PUBLIC
        if ladder and in_setting:
            chosen, lost = _ladder_rows(in_setting, inputs)
            released = ladder_replay(chosen, inputs)[1] if chosen else {}
            chosen = [r for r in chosen if r.submission.id in released]
        else:
            chosen, lost = readable(select_entries(in_setting, part, finals), inputs)
        if not chosen and not lost:
            continue
        board = Board(part, setting)
        for ranked in (False, True):
            members = [r for r in chosen if r.participant.is_baseline != ranked]
            missing = [unavailable_entry(r, setting, finals, ladder=ladder) for r in lost if r.participant.is_baseline != ranked]
            if not members:
                board.entries = (missing + board.entries) if ranked else (board.entries + missing)
                continue
            loaded = [_values(r, inputs, part) for r in members]
            table = ScoreTable.from_values([r.submission.id for r in members], loaded[0][0], [v for _, _, v in loaded], loaded[0][1])
            key = (
                part,
                setting,
                ranked,
                tuple((r.submission.id, r.result.id) for r in members),
                inputs.fraction,
                inputs.resamples,
                inputs.seed,
                inputs.secret,
            )
            result = _comparison(competition_of(inputs.public_key), key, table, inputs.resamples, inputs.seed)
            board.method = result.as_json()["method"] | {
                "measure": result.measure,
                "pairs": "each entry against the one ranked just above it; Holm over all pairs of the board",
            }
            by_id = {r.submission.id: r for r in members}
            index_of = {r.submission.id: index for index, r in enumerate(members)}
            pairs = {(p.first, p.second): p for p in result.pairs}
            above: str | None = None
            rows_out = []
            for stat in result.entries:
                row = by_id[stat.name]
                tasks = table.leaf_means(index_of[stat.name])  # from the signed report, as the score: never the database's copy
                entry = _entry(
                    row,
                    setting,
                    finals,
                    stat.score,
                    tasks,
                    ci_low=stat.ci_low,
                    ci_high=stat.ci_high,
                    released=released.get(row.submission.id),
                    contamination=_contamination(row, inputs),
                    cost=_cost(row, inputs),
                )
                if ranked:
                    entry.rank, entry.rank_low, entry.rank_high, entry.group = stat.rank, stat.rank_low, stat.rank_high, stat.group
                    if above is not None and (above, stat.name) in pairs:
                        pair = pairs[(above, stat.name)]
                        entry.vs_above = {
                            "submission": above,
                            "difference": pair.mean_difference,
                            "effect_size": pair.effect_size,
                            "t_p_holm": pair.t_p_holm,
                            "randomization_p_holm": pair.randomization_p_holm,
                        }
                    above = stat.name
                rows_out.append(entry)
            if ranked and released:
                # Ladder mode ranks by the released scores (ties share a rank); intervals and groups stay those of the raw values
                rows_out = released_order(rows_out, inputs.secret)
                for e in rows_out:
                    e.rank = 1 + sum(1 for other in rows_out if (other.released or 0.0) > (e.released or 0.0))
            rows_out += missing  # unranked, after the rows whose numbers could be derived
            board.entries = (rows_out + board.entries) if ranked else (board.entries + rows_out)
        boards.append(board)
    return boards


def _ladder_rows(rows: list[Scored], inputs: BoardInputs) -> tuple[list[Scored], list[Scored]]:
    """Ladder mode: the rows to replay, and one unavailable row per participant with any report unavailable.

    The replay runs through each of a participant's submissions in order, so one lost report makes every
    later released score of theirs unknown: their row says so rather than showing a score that skips it.
    """
    ok, lost = readable(rows, inputs)
    lost_by_participant: dict[int, Scored] = {}
    for row in sorted(lost, key=lambda r: (r.submission.uploaded_at, r.submission.id)):
        lost_by_participant.setdefault(row.participant.id, row)
    return [r for r in ok if r.participant.id not in lost_by_participant], list(lost_by_participant.values())
