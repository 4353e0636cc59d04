"""Retention of the workers' compact runs (``state/runs/<id>/<attempt>/``): what the competition's policy keeps.

The runs are what ``grader admin rejudge --rescore`` re-scores (a corrected qrels file, a
new metric). ``[retention] runs`` bounds them (docs/hosting.md#retention):

* ``all`` (the default): every run, for ever.
* ``finals-and-best``: every run until the end; after it only the runs of the attempt that
  made each kept submission's current result, where a submission is kept when it is one of
  its participant's finals or their best entry on a board (public or private, each training
  setting; in ladder mode also the entry the Ladder released). A submission that has not
  ended (queued or running again after a rejudge) keeps every run it has.

So pruning never removes a run a final or a board row needs. :func:`plan` says what the
policy removes (now, or at the end as things stand); :func:`prune` removes it, after the
end only (the server's reaper calls it).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.hosting.config import RETAIN_ALL, Competition
from grader.hosting.db.models import Result, Submission
from grader.hosting.db.session import Database
from grader.hosting.leaderboard.board import SETTINGS, BoardInputs, finals_of, ladder_replay, scored_rows, select_entries, setting_of
from grader.hosting.schedule import has_ended
from grader.hosting.states import IN_FLIGHT
from grader.hosting.storage import StateDir
from grader.hosting.visibility import Part

#: A submission in flight may still get runs (a job queued, running or waiting for its other replicas, after a rejudge too): all of
#: its runs stay (a replica's runs are what the next replica's are compared with).
UNFINISHED = frozenset(state.value for state in IN_FLIGHT)


@dataclass
class RunsPlan:
    """The runs held and what the policy removes of them: attempt folders, with their runs and bytes."""

    policy: str
    ended: bool
    held_runs: int = 0
    held_bytes: int = 0
    remove: list[Path] = field(default_factory=list)
    remove_runs: int = 0
    remove_bytes: int = 0

    def summary(self) -> str:
        """One line for the host: what the policy removes, and when."""
        if self.policy == RETAIN_ALL:
            return "retention policy 'all': every run is kept"
        when = "removed after the end" if self.ended else "to be removed at the end, as things stand"
        return (
            f"retention policy {self.policy!r}: {self.remove_runs} run(s) of {len(self.remove)} attempt(s), "
            f"{self.remove_bytes} bytes ({self.remove_bytes / 1e6:.1f} MB), {when}; kept: the finals' and each board's best"
        )


def kept_submissions(session: Session, competition: Competition, board: BoardInputs | None) -> set[str]:
    """The ids of the submissions whose current result's runs ``finals-and-best`` keeps (see the module docstring).

    In ladder mode the Ladder's released entries are replayed when ``board`` (host key, secret) is given;
    without it every scored hidden-split submission is kept, since which one the Ladder shows is not known.
    """
    every = scored_rows(session)
    kept: set[str] = set()
    # each phase has its own boards (its submissions only, its own Ladder setting): each one's best is kept
    for phase in competition.phases or (None,):
        rows = [row for row in every if phase is None or phase.holds(row.submission.uploaded_at)]
        ruled = competition.in_phase(phase)
        finals = finals_of(session, rows, ruled.leaderboard.finals)
        kept |= set().union(*finals.values()) if finals else set()
        for setting in SETTINGS:
            in_setting = [row for row in rows if setting_of(row.submission.labels) == setting]
            if not in_setting:
                continue
            for part in Part:
                kept.update(row.submission.id for row in select_entries(in_setting, part, finals))
            if ruled.leaderboard.ladder:
                replayed = replace(board, ladder=True, ladder_step=ruled.leaderboard.ladder_step) if board is not None else None
                kept.update(ladder_replay(in_setting, replayed)[1] if replayed is not None else (row.submission.id for row in in_setting))
    return kept


def _needed(session: Session, competition: Competition, board: BoardInputs | None) -> tuple[set[tuple[str, int]], set[str]]:
    """(the (submission, attempt) folders kept, the submissions all of whose folders are kept)."""
    kept = kept_submissions(session, competition, board)
    folders: set[tuple[str, int]] = set()
    if kept:
        rows = session.execute(select(Submission.id, Result.attempt).join(Result, Result.id == Submission.result_id).where(Submission.id.in_(kept)))
        folders = {(sid, int(attempt)) for sid, attempt in rows}
    unfinished = set(session.scalars(select(Submission.id).where(Submission.state.in_(UNFINISHED))).all())
    return folders, unfinished


def _attempt_folders(state: StateDir) -> list[tuple[str, int, Path]]:
    """Every ``runs/<id>/<attempt>/`` folder (links and stray names left alone)."""
    root = state.root / "runs"
    if not root.is_dir():
        return []
    found = []
    for submission in sorted(root.iterdir()):
        if submission.is_symlink() or not submission.is_dir():
            continue
        for attempt in sorted(submission.iterdir()):
            if attempt.name.isdigit() and attempt.is_dir() and not attempt.is_symlink():
                found.append((submission.name, int(attempt.name), attempt))
    return found


def _runs_in(folder: Path) -> tuple[int, int]:
    runs = [path for path in folder.glob("*.run") if path.is_file() and not path.is_symlink()]
    return len(runs), sum(path.stat().st_size for path in runs)


def plan(db: Database, state: StateDir, competition: Competition, board: BoardInputs | None = None) -> RunsPlan:
    """The runs held and the attempt folders the policy removes (after the end: now; before it: at the end, as things stand)."""
    policy = competition.retention.runs
    ended = has_ended(db, competition)
    found = _attempt_folders(state)
    result = RunsPlan(policy, ended)
    for _sid, _attempt, folder in found:
        runs, size = _runs_in(folder)
        result.held_runs += runs
        result.held_bytes += size
    if policy == RETAIN_ALL:
        return result
    with db.session() as session:
        folders, unfinished = _needed(session, competition, board)
    for sid, attempt, folder in found:
        if sid in unfinished or (sid, attempt) in folders:
            continue
        runs, size = _runs_in(folder)
        result.remove.append(folder)
        result.remove_runs += runs
        result.remove_bytes += size
    return result


def prune(db: Database, state: StateDir, competition: Competition, board: BoardInputs | None = None) -> RunsPlan:
    """Remove what the policy removes, once the competition has ended (before: nothing); the plan carried out."""
    if competition.retention.runs == RETAIN_ALL or not has_ended(db, competition):
        return RunsPlan(competition.retention.runs, False)  # nothing walked: the reaper asks this every minute
    done = plan(db, state, competition, board)
    for folder in done.remove:
        shutil.rmtree(folder, ignore_errors=True)
        try:
            folder.parent.rmdir()  # the submission's folder, once its last attempt is gone
        except OSError:
            pass
    return done
