"""Fixtures of the hosting tests: a database on SQLite and on a real PostgreSQL, and the world built on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosting.postgres import postgres_cluster, private_postgres_cluster  # noqa: F401 - fixtures
from tests.hosting.world import World, make_database_world


# The PostgreSQL runs start a server (a throw-away cluster): slow, so `pytest -m "not slow"` runs the SQLite half.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """None (SQLite in the state folder) or the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    cluster = request.getfixturevalue("postgres_cluster")
    return cluster.new_database()  # type: ignore[no-any-return]


@pytest.hookimpl(tryfirst=True)  # before the fixture's own two parameters are applied: these replace them
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A module marked sqlite_only (its tests drive `grader admin --state`, which opens the state's SQLite) runs once.
    if "database_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("sqlite_only"):
        metafunc.parametrize("database_url", [None], ids=["sqlite"])


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path, database_url: str | None) -> Iterator[World]:
    """The world a test acts on (tests/hosting/world.py), built on ``database_url``.

    By default a migrated database with a competition, a participant and two workers
    (``make_database_world``: no server context); under ``@pytest.mark.board`` the served leaderboard
    competition (tests/hosting/leaderboard_world.py), with its demo submissions under ``board(seeded=True)``.
    """
    board = request.node.get_closest_marker("board")
    if board is None:
        built = make_database_world(tmp_path, database_url)
    else:
        from tests.hosting.leaderboard_world import make_world as make_board
        from tests.hosting.leaderboard_world import seed_demo

        built = make_board(tmp_path, database_url)
        if board.kwargs.get("seeded", False):
            seed_demo(built)
    yield built
    built.db.dispose()
