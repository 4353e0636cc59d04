"""Migrations match the models (Alembic's autogenerate comparison, plus the CHECK constraints it does not compare),
and an upgrade keeps the rows of an older schema; on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import CheckConstraint, Engine, inspect, text
from sqlalchemy.exc import IntegrityError

from grader.hosting.db import session as sessions
from grader.hosting.db.models import Base
from grader.hosting.db.session import Database, _alembic_config, head_revision, migrate
from grader.hosting.states import State, Track


@pytest.fixture
def engine(tmp_path: Path, database_url: str | None) -> Iterator[Engine]:
    """An empty database (SQLite in tmp_path, or a fresh PostgreSQL database), not yet migrated."""
    database = Database(sessions.database_url(tmp_path, database_url))
    yield database.engine
    database.dispose()


def _allowed_values(sql: str) -> frozenset[str]:
    return frozenset(re.findall(r"'([^']*)'", sql))


def _checks_declared() -> dict[str, dict[str, frozenset[str]]]:
    """{table: {constraint name: the values it allows}} of the models."""
    declared: dict[str, dict[str, frozenset[str]]] = {}
    for table in Base.metadata.sorted_tables:
        for constraint in table.constraints:
            if isinstance(constraint, CheckConstraint):
                sql = str(constraint.sqltext.compile(compile_kwargs={"literal_binds": True}))
                declared.setdefault(table.name, {})[str(constraint.name)] = _allowed_values(sql)
    return declared


def _checks_in_database(engine: Engine) -> dict[str, dict[str, frozenset[str]]]:
    """The same, as the migrated database holds them."""
    inspector = inspect(engine)
    found: dict[str, dict[str, frozenset[str]]] = {}
    for table in inspector.get_table_names():
        for check in inspector.get_check_constraints(table):
            found.setdefault(table, {})[str(check["name"])] = _allowed_values(str(check["sqltext"]))
    return found


def test_migrated_schema_matches_the_models(engine: Engine) -> None:
    assert migrate(engine) == head_revision()
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True, "compare_server_default": True})
        drift = compare_metadata(context, Base.metadata)
    assert drift == [], f"the models and the migrations differ (add a migration): {drift}"
    # Alembic's comparison leaves CHECK constraints out: compare their names and the values they allow
    # (a new state or track without a migration fails here).
    assert _checks_in_database(engine) == _checks_declared()
    states, tracks = frozenset(s.value for s in State), frozenset(t.value for t in Track)
    assert _checks_declared() == {
        "submissions": {"ck_submission_state": states, "ck_submission_track": tracks},
        "results": {"ck_result_state": states},
        "transitions": {"ck_transition_from_state": states, "ck_transition_to_state": states},
        "upload_reservations": {"ck_upload_reservation_track": tracks},
    }


def test_migrating_twice_is_a_no_op(engine: Engine) -> None:
    assert migrate(engine) == migrate(engine) == head_revision() == "0021_teams"


def _rows_of_release_0_2_0(engine: Engine) -> None:
    """One submission with the rows that refer to it, as schema 0003 held them (raw SQL: the models are newer)."""
    statements = [
        "INSERT INTO participants (id, name, token_sha256, is_baseline, created_at) VALUES (1, 'alice', 't', false, '2026-12-01 00:00:00')",
        "INSERT INTO workers (id, name, token_sha256, local, created_at) VALUES (1, 'w1', 'w', true, '2026-12-01 00:00:00')",
        "INSERT INTO pins (id, competition, grader_version, digests, active, pinned_at) VALUES (1, 'c', '0.2.0', '{}', true, '2026-12-01 00:00:00')",
        "INSERT INTO submissions (id, participant_id, name, kind, track, split, state, upload_path, upload_sha256, upload_bytes,"
        " content_digest, uploaded_at, updated_at, attempt, attempt_limit, version, pin_id)"
        " VALUES ('s1', 1, 'x', 'onnx', 'sample', 'dev', 'failed', 'u', 'h', 1, 'd', '2026-12-01 00:00:00', '2026-12-01 00:00:00', 1, 3, 3, 1)",
        "INSERT INTO transitions (submission_id, from_state, to_state, attempt, actor, reason, at)"
        " VALUES ('s1', NULL, 'received', 0, 'upload', '', '2026-12-01 00:00:00')",
        "INSERT INTO attempts (submission_id, number, worker_id, claimed_at, heartbeat_at, lease_expires_at)"
        " VALUES ('s1', 1, 1, '2026-12-01 00:00:00', '2026-12-01 00:00:00', '2026-12-01 00:00:00')",
        "INSERT INTO results (submission_id, attempt, pin_id, worker_id, state, created_at) VALUES ('s1', 1, 1, 1, 'failed', '2026-12-01 00:00:00')",
        "INSERT INTO final_choices (submission_id, participant_id, chosen_at) VALUES ('s1', 1, '2026-12-01 00:00:00')",
    ]
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))


def test_upgrade_from_0003_keeps_rows_and_references_then_checks(engine: Engine) -> None:
    assert migrate(engine, "0003_workers") == "0003_workers"
    _rows_of_release_0_2_0(engine)
    assert migrate(engine) == head_revision()  # SQLite: the table is rebuilt while four tables refer to it
    with engine.connect() as connection:
        assert connection.execute(text("SELECT state, track, version FROM submissions")).one() == ("failed", "sample", 3)
        for table in ("transitions", "attempts", "results", "final_choices"):
            assert connection.execute(text(f"SELECT count(*) FROM {table} WHERE submission_id = 's1'")).scalar() == 1
        if engine.dialect.name == "sqlite":
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1  # enforcement is back on after the migration
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(text("UPDATE submissions SET state = 'lost'"))
    with pytest.raises(IntegrityError), engine.begin() as connection:  # references are enforced again
        connection.execute(text("DELETE FROM submissions"))
    indexes = {index["name"] for index in inspect(engine).get_indexes("submissions")}
    assert {"ix_submissions_state", "ix_submissions_participant"} <= indexes


#: The columns 0010_state_columns checks: (table, column).
STATE_COLUMNS = (("results", "state"), ("transitions", "from_state"), ("transitions", "to_state"), ("upload_reservations", "track"))


def _downgrade(engine: Engine, revision: str) -> None:
    """Alembic's downgrade to ``revision``, with SQLite's reference checks off around it as :func:`migrate` has them."""
    from alembic import command

    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        with connection.begin():
            config = _alembic_config()
            config.attributes["connection"] = connection
            command.downgrade(config, revision)
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()


def test_0010_checks_the_state_columns_of_rows_already_there_and_downgrades(engine: Engine) -> None:
    assert migrate(engine, "0009_shard_jobs") == "0009_shard_jobs"
    _rows_of_release_0_2_0(engine)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO upload_reservations (participant_id, idempotency_key, track, body_sha256, declared_bytes, holder, created_at, expires_at)"
                " VALUES (1, 'k', 'hidden', 'h', 1, 'r', '2026-12-01 00:00:00', '2026-12-01 00:10:00')"
            )
        )
    assert migrate(engine, "0010_state_columns") == "0010_state_columns"
    with engine.connect() as connection:  # the rows, each value one of the enum's, are all still there
        assert connection.execute(text("SELECT state FROM results")).scalars().all() == ["failed"]
        assert connection.execute(text("SELECT from_state, to_state FROM transitions")).all() == [(None, "received")]
        assert connection.execute(text("SELECT track FROM upload_reservations")).scalars().all() == ["hidden"]
    for table, column in STATE_COLUMNS:
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text(f"UPDATE {table} SET {column} = 'lost'"))
    _downgrade(engine, "0009_shard_jobs")
    assert set(_checks_in_database(engine)) == {"submissions"}
    with engine.begin() as connection:  # unchecked again, as 0009 had them
        for table, column in STATE_COLUMNS:
            connection.execute(text(f"UPDATE {table} SET {column} = 'lost'"))
        assert connection.execute(text("SELECT count(*) FROM results WHERE submission_id = 's1'")).scalar() == 1


RESERVATION = (
    "INSERT INTO upload_reservations (participant_id, idempotency_key, track, body_sha256, declared_bytes, holder, created_at, expires_at)"
    " VALUES (1, 'k', 'hidden', 'h', 1, 'r', '2026-12-01 00:00:00', '2026-12-01 00:10:00')"
)


def test_0011_gives_a_reservation_already_there_its_creation_as_arrival_and_downgrades(engine: Engine) -> None:
    assert migrate(engine, "0010_state_columns") == "0010_state_columns"
    _rows_of_release_0_2_0(engine)
    with engine.begin() as connection:
        connection.execute(text(RESERVATION))
    assert migrate(engine) == head_revision()
    with engine.connect() as connection:  # as old as it can be: a retry under its key may take it over at once
        arrived, created = connection.execute(text("SELECT arrived_at, created_at FROM upload_reservations")).one()
        assert arrived == created
    with pytest.raises(IntegrityError), engine.begin() as connection:  # every new row must say when it arrived
        connection.execute(text(RESERVATION.replace("'k'", "'k2'")))
    _downgrade(engine, "0010_state_columns")
    assert "arrived_at" not in {column["name"] for column in inspect(engine).get_columns("upload_reservations")}
    with engine.connect() as connection:
        assert connection.execute(text("SELECT idempotency_key FROM upload_reservations")).scalars().all() == ["k"]


SHARD_JOB = (
    "INSERT INTO shard_jobs (submission_id, attempt, task, number, state, tries, worker_id, lease_expires_at, message)"
    " VALUES ('s1', 1, 't', -1, 'running', 2, 1, '2026-12-01 00:10:00', '')"
)


def test_0012_keeps_a_shard_job_already_there_charged_without_a_deadline_and_downgrades(engine: Engine) -> None:
    assert migrate(engine, "0011_upload_arrival") == "0011_upload_arrival"
    _rows_of_release_0_2_0(engine)
    with engine.begin() as connection:
        connection.execute(text(SHARD_JOB))
    assert migrate(engine, "0012_shard_deadline") == "0012_shard_deadline"
    with engine.connect() as connection:  # its try stays charged (used), and it has no deadline (planned without one)
        assert connection.execute(text("SELECT tries, used, unused, deadline_at FROM shard_jobs")).one() == (2, True, 0, None)
    with pytest.raises(IntegrityError), engine.begin() as connection:  # every new row says whether its try was used
        connection.execute(text(SHARD_JOB.replace("'t'", "'u'")))
    _downgrade(engine, "0011_upload_arrival")
    assert not {"used", "unused", "deadline_at"} & {column["name"] for column in inspect(engine).get_columns("shard_jobs")}
    with engine.connect() as connection:
        assert connection.execute(text("SELECT tries FROM shard_jobs")).scalars().all() == [2]


def test_0013_clears_a_fingerprint_a_claim_wrote_counts_no_refusal_and_downgrades(engine: Engine) -> None:
    assert migrate(engine, "0012_shard_deadline") == "0012_shard_deadline"
    _rows_of_release_0_2_0(engine)
    with engine.begin() as connection:  # before: whatever the worker's last claim stated
        connection.execute(text("UPDATE workers SET fingerprint = :digest"), {"digest": "a" * 64})
    assert migrate(engine, "0013_fingerprint_binding") == "0013_fingerprint_binding"
    with engine.connect() as connection:  # stated by a claim, never bound: the worker states it again at its next start
        row = connection.execute(
            text("SELECT fingerprint, fingerprint_stated, fingerprint_signature, fingerprint_refusals, fingerprint_refused FROM workers")
        )
        assert row.one() == (None, None, None, 0, None)
    with pytest.raises(IntegrityError), engine.begin() as connection:  # every new row counts its refusals
        connection.execute(
            text(
                "INSERT INTO workers (id, name, token_sha256, local, created_at, fingerprint_refusals) VALUES (2, 'w2', 'x', true, '2026-12-01 00:00:00', NULL)"
            )
        )
    _downgrade(engine, "0012_shard_deadline")
    columns = {column["name"] for column in inspect(engine).get_columns("workers")}
    assert "fingerprint" in columns and not {"fingerprint_stated", "fingerprint_signature", "fingerprint_refusals", "fingerprint_refused"} & columns


REPLICAS = (
    "INSERT INTO replicas (submission_id, attempt, pin_id, worker_id, fingerprint, outcome, detail, verdict, created_at) VALUES"
    " ('s1', 1, 1, 1, 'f', 'o1', '{}', 'dissent', '2026-12-01 00:00:00'),"
    " ('s1', 2, 1, 1, 'f', 'o2', '{}', 'majority', '2026-12-01 00:00:00')"
)


def test_0014_charges_a_dissent_already_there_to_its_coordinator_and_downgrades(engine: Engine) -> None:
    assert migrate(engine, "0012_shard_deadline") == "0012_shard_deadline"
    _rows_of_release_0_2_0(engine)
    assert migrate(engine, "0013_fingerprint_binding") == "0013_fingerprint_binding"
    with engine.begin() as connection:
        connection.execute(text(REPLICAS))
    assert migrate(engine) == head_revision()
    with engine.connect() as connection:  # the one worker recorded then: the dissent was its coordinator's
        rows = connection.execute(text("SELECT verdict, blamed_worker_id FROM replicas ORDER BY attempt")).all()
        assert [tuple(row) for row in rows] == [("dissent", 1), ("majority", None)]
    _downgrade(engine, "0013_fingerprint_binding")
    assert "blamed_worker_id" not in {column["name"] for column in inspect(engine).get_columns("replicas")}


def test_0015_leaves_rows_claimable_at_once_and_downgrades(engine: Engine) -> None:
    assert migrate(engine, "0012_shard_deadline") == "0012_shard_deadline"
    _rows_of_release_0_2_0(engine)
    assert migrate(engine, "0014_replica_blame") == "0014_replica_blame"
    assert migrate(engine) == head_revision()
    with engine.connect() as connection:  # no backoff, no platform failure recorded: claimed at once, tries counted as before
        rows = connection.execute(text("SELECT retry_at, infra_since FROM submissions")).all()
        assert rows and all(tuple(row) == (None, None) for row in rows)
    _downgrade(engine, "0014_replica_blame")
    for table in ("submissions", "shard_jobs"):
        assert {"retry_at", "infra_since"}.isdisjoint(column["name"] for column in inspect(engine).get_columns(table))
