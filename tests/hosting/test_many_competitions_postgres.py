"""A server of many competitions on PostgreSQL (`grader serve --competitions DIR --database URL`), through a real server.

Two competitions on one PostgreSQL database, each in its own schema (libpq's ``search_path``): the schemas exist,
nothing of either is in ``public``, and one's tables hold none of the other's rows; participants are added with
``grader admin --in NAME --database URL``; a submission is graded in the real Docker sandbox in one of them; the
listing reads both ends; a third competition is added while the server runs and gets its own schema. And the
connection pools: each competition's is a share of one server-wide budget, so many competitions stay within
PostgreSQL's ``max_connections``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from grader.hosting.db.session import PoolSize
from grader.hosting.directory.layout import competition_schema
from grader.hosting.serve_many import SERVER_CONNECTIONS, SHARED_UP_TO, competition_pool
from tests.hosting.support import REPO, ManyServer, admin, grader_cli, wait_for, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


def rows(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(query, args).fetchall())  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, postgres_cluster):  # type: ignore[no-untyped-def]
    require_docker([RUNNER_IMAGE])
    root = tmp_path_factory.mktemp("many-pg")
    files = root / "competitions"
    files.mkdir()
    write_competition(files / "alpha.toml", name="alpha", title="Alpha on PostgreSQL")
    write_competition(files / "beta.toml", name="beta")
    url = postgres_cluster.new_database()
    server = ManyServer(files, root / "state", workers=1, database=url).start()
    server.root = root  # type: ignore[attr-defined]
    server.tokens = {  # type: ignore[attr-defined]
        "alice": admin(server.state, "--in", "alpha", "add-participant", "alice", database=url).strip(),
        "bob": admin(server.state, "--in", "beta", "add-participant", "bob", database=url).strip(),
    }
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.docker(RUNNER_IMAGE)
def test_two_competitions_in_their_own_schemas(served: ManyServer, tmp_path: Path) -> None:
    url = served.database
    assert url is not None
    alpha, beta = competition_schema("alpha"), competition_schema("beta")
    schemas = {name for (name,) in rows(url, "SELECT schema_name FROM information_schema.schemata")}
    assert {alpha, beta} <= schemas
    # every table of each competition is in its schema, Alembic's version table too; none in public
    tables: dict[str, set[str]] = {}
    for schema, table in rows(
        url, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
    ):
        tables.setdefault(schema, set()).add(table)
    assert {"submissions", "participants", "results", "log_entries", "alembic_version"} <= tables[alpha]
    assert tables[alpha] == tables[beta] and "public" not in tables

    # participants added with `grader admin --in NAME --database URL` land in their competition's schema only
    assert rows(url, f'SELECT name FROM "{alpha}".participants WHERE NOT is_baseline ORDER BY name') == [("alice",)]
    assert rows(url, f'SELECT name FROM "{beta}".participants WHERE NOT is_baseline ORDER BY name') == [("bob",)]

    # graded in alpha, in the real sandbox: its rows are alpha's; beta's tables hold none of them
    alice = {"GRADER_TOKEN": served.tokens["alice"]}  # type: ignore[attr-defined]
    scored = grader_cli("submit", str(EXAMPLE), "--server", served.base("alpha"), "--wait", env=alice)
    assert scored.returncode == 0, scored.stderr + scored.stdout
    scored_id = scored.stdout.split()[0]
    assert f"{scored_id}  scored  public score " in scored.stdout
    assert rows(url, f'SELECT id, state FROM "{alpha}".submissions') == [(scored_id, "scored")]
    assert rows(url, f'SELECT count(*) FROM "{beta}".submissions') == [(0,)]
    assert rows(url, f'SELECT count(*) FROM "{beta}".results') == [(0,)]
    assert rows(url, f'SELECT count(*) FROM "{beta}".log_entries WHERE submission_id = %s', scored_id) == [(0,)]
    assert rows(url, f'SELECT count(*) FROM "{alpha}".log_entries WHERE submission_id = %s', scored_id)[0][0] >= 2  # receipt, report
    # each competition's log checkpoint counts its own entries, as its schema holds them
    for name, schema in (("alpha", alpha), ("beta", beta)):
        size = int(httpx.get(f"{served.base(name)}/log/checkpoint", timeout=30).text.splitlines()[1])
        assert size == rows(url, f'SELECT count(*) FROM "{schema}".log_entries')[0][0], name
    board = httpx.get(f"{served.url}/api/v1/competitions/alpha/leaderboard", timeout=30).json()
    assert [e["participant"] for b in board["boards"] for e in b["entries"]] == ["alice"]
    listed = httpx.get(f"{served.base('alpha')}/api/v1/submissions", headers={"Authorization": f"Bearer {served.tokens['alice']}"}, timeout=30)  # type: ignore[attr-defined]
    assert [s["id"] for s in listed.json()] == [scored_id]
    # bob is a person of the server registered in beta only: alpha answers 404 for everything of it
    bob = {"Authorization": f"Bearer {served.tokens['bob']}"}  # type: ignore[attr-defined]
    assert httpx.get(f"{served.base('alpha')}/api/v1/submissions", headers=bob, timeout=30).status_code == 404


@pytest.mark.slow
def test_the_listing_and_a_third_added_while_serving(served: ManyServer) -> None:
    url = served.database
    assert url is not None
    listed = httpx.get(f"{served.url}/api/v1/competitions", timeout=30).json()
    assert [(c["name"], c["status"]) for c in listed] == [("alpha", "open"), ("beta", "open")]
    page = httpx.get(f"{served.url}/", timeout=30)
    assert page.status_code == 200 and "Alpha on PostgreSQL" in page.text

    gamma = write_competition(served.root / "gamma.toml", name="gamma")  # type: ignore[attr-defined]
    assert "added competition 'gamma'" in admin(served.state, "competition", "add", str(gamma), database=url)
    # its schema is made (and migrated) by the command, before the server serves it
    assert rows(
        url, "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = 'submissions'", competition_schema("gamma")
    ) == [(1,)]
    wait_for(lambda: httpx.get(f"{served.base('gamma')}/api/v1/competition", timeout=30).status_code == 200, timeout=60, what="gamma served")
    token = admin(served.state, "--in", "gamma", "add-participant", "carol", database=url).strip()
    quota = httpx.get(f"{served.base('gamma')}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert quota.status_code == 200 and quota.json()["hidden"]["used_total"] == 0
    assert rows(url, f'SELECT name FROM "{competition_schema("gamma")}".participants WHERE NOT is_baseline') == [("carol",)]
    assert rows(url, f'SELECT count(*) FROM "{competition_schema("alpha")}".participants WHERE name = %s', "carol") == [(0,)]
    assert [c["name"] for c in httpx.get(f"{served.url}/api/v1/competitions", timeout=30).json()] == ["alpha", "beta", "gamma"]
    # the server's connections to the database stay within the three competitions' pools
    connected = rows(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")[0][0]
    assert connected <= 3 * competition_pool(2).most


def test_connection_pools_share_one_budget() -> None:
    # a server of one or two competitions keeps a one-competition server's pool
    assert competition_pool(1) == PoolSize() and competition_pool(2) == PoolSize()
    # twenty competitions hold at most the server's budget together, each still able to serve two requests at once
    for count in (3, 7, 20, SHARED_UP_TO):
        pool = competition_pool(count)
        assert count * pool.most <= SERVER_CONNECTIONS and pool.most >= 2 and pool.size >= 1, count
    assert competition_pool(20).most * 20 <= 100 - 20  # PostgreSQL's default max_connections, with room for the host's own
    # beyond the budget, two each (docs/hosting.md: raise max_connections)
    assert competition_pool(SHARED_UP_TO * 3) == PoolSize(1, 1)
