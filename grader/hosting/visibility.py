"""Who may see what, and from when: the visibility rules of a hosted competition, in one place.

- The competition ends at the file's ``end`` or earlier, when the host ends it (``grader admin end``).
- The public board is visible always; the private board from the end on (the host sees both at any time
  through ``grader admin leaderboard``, never over HTTP).
- A participant downloads their own reports: a sample-split run's full report at once; of a hidden-split
  grade, the public-part report (signed by the host) until the end, and only of a scored grade, and never in
  Ladder mode (its finer numbers would undo the Ladder); the full report from the end on. A failed hidden
  grade's report waits for the end: its other tasks scored over the whole hidden split, private part included.
- The inclusion proof of a report's log entry reaches its participant at once, a withheld report's too
  (the entry holds digests only).
- Container logs are shown of sample-split runs only, never of hidden grades (they could carry hidden data).
- Over public test data (``test_data = "public"``) every number is disclosed from the start, as at the end
  (:func:`disclosed`).

The routes, the pages, the submission view and the board's report links all ask these functions, so they
cannot disagree. The functions are pure: whether the competition has ended is an argument, read once per
request by the caller's service (:mod:`grader.hosting.schedule`), never here.
"""

from __future__ import annotations

import enum

from grader.hosting.states import State, Track


class Part(enum.StrEnum):
    """A part of the hidden split's queries, and the board that ranks on it (docs/statistics.md)."""

    #: the queries whose scores are published from day one
    PUBLIC = "public"
    #: the queries whose scores are published at the end
    PRIVATE = "private"
    #: every query of the graded split: the board of public test data (``test_data = "public"``), whose rows link the full
    #: signed reports they show, so that anyone checks each number (``grader log audit --board``) or re-scores the run
    FULL = "full"


class Download(enum.Enum):
    """Which signed report a participant may download of one of their submissions."""

    NONE = "none"
    #: the public-part report, signed by the host on the server (a hidden grade before the end)
    PUBLIC_PART = "public-part"
    #: the full report as graded (a sample run at once, a hidden grade after the end)
    FULL = "full"


def disclosed(*, ended: bool, public_data: bool) -> bool:
    """Whether every number of a hidden-split grade is public: from the end on; from the start when the graded split's
    judgements are public (``test_data = "public"``): anyone scores a run on them locally, so a withheld number hides
    nothing from a participant and only keeps a reader from checking the board (docs/hosting.md#standing-leaderboards).

    The callers pass this, not the end alone, as ``ended`` to the rules below; the partition secret and the blinding
    key still wait for the real end (their reveal is the log's, :mod:`grader.hosting.transparency.log_events`)."""
    return ended or public_data


def board_visible(part: Part | str, *, ended: bool, public_data: bool = False) -> bool:
    """Whether anyone may see the board of ``part``: the public one always, the private one from the end on, the full one
    over public test data only (over hidden data it would publish the private part's numbers before the end)."""
    if part == Part.FULL:
        return public_data
    return part == Part.PUBLIC or (part == Part.PRIVATE and ended)


def default_part(*, ended: bool, public_data: bool) -> Part:
    """The board a reader gets unless they name one: over public data the full one; else the public one until the real
    end (``ended``: the end, not the disclosure), the final standings (private) after it."""
    if public_data:
        return Part.FULL
    return Part.PRIVATE if ended else Part.PUBLIC


def report_download(*, track: Track | str, result_state: State | str | None, ended: bool, ladder: bool) -> Download:
    """Which report of a submission its participant may download.

    ``result_state`` is the state of the submission's current result (``scored``, ``failed``), None when it
    has no result with a signed report.
    """
    if result_state is None:
        return Download.NONE
    if track != Track.HIDDEN or ended:
        return Download.FULL
    if result_state != State.SCORED or ladder:
        return Download.NONE
    return Download.PUBLIC_PART


def proof_download(*, track: Track | str, result_state: State | str | None, ended: bool, ladder: bool) -> Download:
    """Which report's log entry a participant gets the inclusion proof of, at once (docs/transparency.md).

    The report they may download (:func:`report_download`); or, of a hidden grade whose report is withheld until the
    end (a failed grade: its other tasks' numbers are over the whole hidden split, private part included; any grade
    in Ladder mode), the full report's entry: it holds only digests, public in the log already, so the host is bound
    to that report at once and the participant checks the report against it when it is published at the end.
    """
    download = report_download(track=track, result_state=result_state, ended=ended, ladder=ladder)
    return Download.FULL if download is Download.NONE and result_state is not None else download


def logs_visible(track: Track | str) -> bool:
    """Whether a submission's container logs may be shown to its participant (sample-split runs only)."""
    return track == Track.SAMPLE
