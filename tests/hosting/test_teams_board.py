"""A team on the board (docs/hosting.md, "Teams"): its members' submissions for it form one row under the team's
name, and its final choices are shared: any member chooses for the row, a non-member cannot choose its submissions;
after the end the row names its submission's maker, so that the audit of the final boards opens its logged report.
Through the served leaderboard competition's own app (routes, services, the real database)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from grader.cli.log_final import check_final_scores
from grader.hosting.api.app import create_app
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Participant, Team, TeamMember
from grader.hosting.leaderboard.board import _cache as board_cache
from tests.hosting.leaderboard_world import seed
from tests.hosting.support import admin
from tests.hosting.transparency_support import reader, served_entries
from tests.hosting.world import World


def _make_team(world: World, name: str, members: list[str]) -> None:
    """The rows `grader team create` and `join` write (the board is under test here, not the joining)."""
    with world.ctx.db.session() as session:
        team = Team(name=name, created_at=utcnow())
        session.add(team)
        session.flush()
        for member in members:
            pid = session.query(Participant.id).filter(Participant.name == member).scalar()
            session.add(TeamMember(participant_id=pid, team_id=team.id, joined_at=utcnow()))


@pytest.mark.board
@pytest.mark.sqlite_only
def test_a_team_is_one_row_under_its_name_and_shares_its_final_choices(world: World) -> None:
    solo = seed(world, "alice", "alice-before", 0.4, rng_seed=1)  # before the team: alice's own row, as today
    _make_team(world, "Lighthouse", ["alice", "bob"])
    mine = seed(world, "alice", "alice-for-team", 0.6, rng_seed=2)
    bobs = seed(world, "bob", "bob-for-team", 0.7, rng_seed=3)
    seed(world, "carol", "carol-own", 0.5, rng_seed=4)
    client = TestClient(create_app(world.ctx))
    rows = client.get("/api/v1/leaderboard").json()["boards"][0]["entries"]
    shown = {(row["participant"], row["submission"]) for row in rows}
    assert ("Lighthouse", bobs.id) in shown  # the team's best, whoever made it
    assert ("alice", solo.id) in shown and "carol" in {row["participant"] for row in rows}
    assert "bob" not in {row["participant"] for row in rows} and mine.id not in {s for _, s in shown}

    def bearer(name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {world.tokens[name]}"}

    # alice chooses for the team; bob sees the choice as the team's
    chose = client.put("/api/v1/finals", json={"submissions": [mine.id]}, headers=bearer("alice"))
    assert chose.status_code == 200, chose.text
    assert client.get("/api/v1/finals", headers=bearer("bob")).json()["finals"] == [mine.id]
    assert client.get("/api/v1/finals", headers=bearer("bob")).json()["chosen"] is True
    # bob's choice replaces it: one set of choices per row
    assert client.put("/api/v1/finals", json={"submissions": [bobs.id]}, headers=bearer("bob")).status_code == 200
    assert client.get("/api/v1/finals", headers=bearer("alice")).json()["finals"] == [bobs.id]
    # a non-member cannot choose the team's submission; nor a member her own from before the team
    assert client.put("/api/v1/finals", json={"submissions": [bobs.id]}, headers=bearer("carol")).status_code == 404
    assert client.put("/api/v1/finals", json={"submissions": [solo.id]}, headers=bearer("alice")).status_code == 404
    # before the end the board names nobody a team hides; after it, a team's row names its submission's maker, and
    # `grader log audit --board` opens the row's logged report to that maker
    assert all("made_by" not in row for row in rows)
    admin(world.state.root, "end", "--yes", database=world.database)
    admin(world.state.root, "log-reveal", "--competition", str(world.ctx.competition.path), database=world.database)
    board_cache.clear()
    private = client.get("/api/v1/leaderboard", params={"part": "private"}).json()["boards"][0]["entries"]
    team_row = next(row for row in private if row["participant"] == "Lighthouse")
    assert (team_row["submission"], team_row["made_by"]) == (bobs.id, "bob")
    assert all("made_by" not in row for row in private if row["participant"] != "Lighthouse")
    assert check_final_scores(served_entries(client, world), reader(client)) is not None
