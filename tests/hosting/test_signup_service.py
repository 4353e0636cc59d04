"""Sign-up's decisions on each database (SQLite, PostgreSQL): the registration row, the host's decision, the log."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from grader.hosting.db.models import LogEntry, Participant
from grader.hosting.directory.people import People, open_people
from grader.hosting.errors import HostingError
from grader.hosting.services import signup
from grader.transparency.entries import decode_entry
from tests.hosting.world import World

pytestmark = pytest.mark.board


def test_a_sign_up_waits_for_approval_is_logged_when_approved_and_a_confusable_name_is_refused(world: World, tmp_path: Path) -> None:
    people = People(open_people(tmp_path, world.database))
    try:
        world.ctx.people = people
        world.ctx.competition = replace(world.ctx.competition, registration="approval", rules="Be fair.")
        digest = signup.rules_sha256("Be fair.")
        made = signup.sign_up(world.ctx, "Yolanda", "y@example.org", digest)
        assert made.state == signup.PENDING and people.holds(made.token)
        with pytest.raises(HostingError, match="too like one taken"):
            signup.sign_up(world.ctx, "YOLANDA", "", digest)
        assert people.named("YOLANDA") is None  # a refused name leaves no person behind
        with world.ctx.db.session() as session:
            assert session.scalar(select(Participant).where(Participant.name == "Yolanda")) is None
            before = session.scalar(select(LogEntry.index).order_by(LogEntry.index.desc()).limit(1))
        row = signup.decide(world.ctx.db, world.ctx.log, people, "Yolanda", approve=True)
        assert row.state == signup.APPROVED and row.email == "y@example.org"
        with pytest.raises(HostingError, match="approved already"):
            signup.decide(world.ctx.db, world.ctx.log, people, "Yolanda", approve=False)
        with world.ctx.db.session() as session:
            assert session.scalar(select(Participant.token_sha256).where(Participant.name == "Yolanda")) == people.named("Yolanda").token_sha256  # type: ignore[union-attr]
            raw = [bytes(entry) for entry in session.scalars(select(LogEntry.entry).where(LogEntry.index > before)).all()]
        logged = [decode_entry(entry) for entry in raw]
        assert [entry["kind"] for entry in logged] == ["registration"] and logged[0]["rules_sha256"] == digest
        assert b"Yolanda" not in b"".join(raw) and b"y@example.org" not in b"".join(raw)
    finally:
        people.db.dispose()
