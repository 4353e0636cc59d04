"""Fixtures of the hosting tests: a database on SQLite and on a real PostgreSQL, and the world built on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosting.postgres import postgres_cluster, private_postgres_cluster  # noqa: F401 - fixtures
from tests.hosting.world import World, make_world


# The PostgreSQL runs start a server (a throw-away cluster): slow, so `pytest -m "not slow"` runs the SQLite half.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """None (SQLite in the state folder) or the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    cluster = request.getfixturevalue("postgres_cluster")
    return cluster.new_database()  # type: ignore[no-any-return]


@pytest.fixture
def world(tmp_path: Path, database_url: str | None) -> Iterator[World]:
    """A migrated database with a competition, a participant and two workers (tests/hosting/world.py)."""
    built = make_world(tmp_path, database_url)
    yield built
    built.db.dispose()
