"""Boards built once are served again until what they show changes (grader/hosting/leaderboard/built.py).

Each step changes one input of a board the way the server (or a host's database edit) does, then checks that the
boards served are the ones a fresh build gives: never a board kept from before the change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select, text

from grader.hosting.db.models import Participant
from grader.hosting.identity.principal import Principal, Role
from grader.hosting.leaderboard import service
from grader.hosting.leaderboard.board import build_boards
from grader.hosting.protocol.messages import Boards
from grader.hosting.visibility import Part
from tests.hosting.leaderboard_world import seed
from tests.hosting.world import World

pytestmark = pytest.mark.board(seeded=True)


def served(world: World) -> Boards:
    return service.board_json(world.ctx, Part.PUBLIC, ended=False)


def fresh(world: World) -> Boards:
    """The boards built now from the database, past every cache of built boards."""
    with world.ctx.db.session() as session:
        found = build_boards(session, Part.PUBLIC, service._board_inputs(world.ctx))
    return service.boards_json(found, competition=world.ctx.competition.name, part=Part.PUBLIC, ended=False)


def names(boards: Boards) -> set[str]:
    return {entry.name for board in boards.boards for entry in board.entries}


def test_a_board_is_served_as_built_until_a_graded_submission_a_final_choice_or_a_row_changes(world: World) -> None:
    ctx = world.ctx
    first = service.boards(ctx, Part.PUBLIC, ended=False)
    assert service.boards(ctx, Part.PUBLIC, ended=False) is first  # nothing changed: the boards built are served again
    assert served(world) == fresh(world)

    # a new graded submission: built again, with it
    seed(world, "mallory", "mallory-late", 0.95, uploaded_ago_s=10, rng_seed=21)
    assert service.boards(ctx, Part.PUBLIC, ended=False) is not first
    assert "mallory-late" in names(served(world)) and served(world) == fresh(world)

    # a final choice: the rows' final marks follow it
    with ctx.db.session() as session:
        alice = session.scalar(select(Participant.id).where(Participant.name == "alice"))
    assert alice is not None
    chosen = world.by_name("alice-encoder-v1").id
    before = served(world)
    service.set_finals(ctx, Principal(Role.PARTICIPANT, alice, "alice"), [chosen])
    after = served(world)
    assert after == fresh(world) and after != before

    # a submission no longer scored (a rejudge put it back in the queue): its row goes
    late = world.by_name("mallory-late").id
    with ctx.db.engine.begin() as connection:
        connection.execute(text("UPDATE submissions SET state = 'queued' WHERE id = :id"), {"id": late})
    assert "mallory-late" not in names(served(world)) and served(world) == fresh(world)

    # a row's current result replaced by another (a re-scoring; here a database edit): built again
    bob = world.by_name("bob-lsa").id
    with ctx.db.engine.begin() as connection:
        connection.execute(text("UPDATE submissions SET state = 'scored' WHERE id = :id"), {"id": late})
        other = connection.execute(text("SELECT result_id FROM submissions WHERE id = :id"), {"id": late}).scalar_one()
        connection.execute(text("UPDATE submissions SET result_id = :other WHERE id = :id"), {"other": other, "id": bob})
    assert served(world) == fresh(world)


def test_a_board_with_a_report_unavailable_is_built_again_and_shows_the_report_once_restored(world: World) -> None:
    target = world.by_name("bob-lsa").id
    with world.ctx.db.engine.begin() as connection:
        path = connection.execute(
            text("SELECT r.envelope_path FROM results r JOIN submissions s ON s.result_id = r.id WHERE s.id = :id"), {"id": target}
        ).scalar_one()
    envelope = Path(path)
    kept = envelope.read_bytes()
    envelope.unlink()
    lost = served(world)
    row = next(entry for board in lost.boards for entry in board.entries if entry.submission == target)
    assert row.unavailable == "report unavailable"
    assert service.boards(world.ctx, Part.PUBLIC, ended=False) is not service.boards(world.ctx, Part.PUBLIC, ended=False)  # not kept
    envelope.write_bytes(kept)  # restored from a backup: shown again without a restart
    back = served(world)
    row = next(entry for board in back.boards for entry in board.entries if entry.submission == target)
    assert row.unavailable is None and row.score is not None and back == fresh(world)
