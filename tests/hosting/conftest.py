"""Fixtures of the hosting tests: a database on SQLite and on a real PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosting.postgres import postgres_cluster, private_postgres_cluster  # noqa: F401 - fixtures


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """None (SQLite in the state folder) or the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    cluster = request.getfixturevalue("postgres_cluster")
    return cluster.new_database()  # type: ignore[no-any-return]
