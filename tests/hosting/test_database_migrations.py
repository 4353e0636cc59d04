"""The schema: migrations reach head and are idempotent; JSON columns read back strictly (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from grader import jsonio
from grader.hosting.db.models import Pin
from grader.hosting.db.session import head_revision, migrate
from tests.hosting.world import World


def test_migrations_reach_head_and_are_idempotent(world: World) -> None:
    assert migrate(world.db.engine) == head_revision() == "0021_teams"
    tables = set(inspect(world.db.engine).get_table_names())
    assert {"participants", "workers", "pins", "settings", "submissions", "transitions", "attempts", "results", "alembic_version"} <= tables
    assert {"result_parts", "final_choices"} <= tables  # 0002_leaderboard
    assert "labels" in {column["name"] for column in inspect(world.db.engine).get_columns("submissions")}
    assert "upload_reservations" in tables  # 0005_upload_idempotency
    assert "idempotency_key" in {column["name"] for column in inspect(world.db.engine).get_columns("submissions")}
    assert "web_sessions" in tables  # 0006_web_sessions
    assert "log_entries" in tables  # 0007_tlog_entries
    assert "replicas" in tables  # 0008_replica_grades
    assert "cpu_s" in {column["name"] for column in inspect(world.db.engine).get_columns("results")}  # 0019_cost


def test_json_columns_are_read_back_strictly(world: World) -> None:
    # JSON columns go through grader.jsonio both ways: what the host wrote reads back, a duplicate key does not.
    with world.db.session() as session:
        pin = session.get(Pin, world.pin_id)
        assert pin is not None and isinstance(pin.digests["tasks"], dict)
        session.execute(text("UPDATE pins SET digests = :raw WHERE id = :id"), {"raw": '{"tasks": {}, "tasks": {}}', "id": world.pin_id})
    with world.db.session() as session, pytest.raises(jsonio.JsonError, match="key 'tasks' appears twice"):
        session.get(Pin, world.pin_id)
