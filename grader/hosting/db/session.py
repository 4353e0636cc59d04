"""Engine, sessions and migrations. SQLite (WAL, in the state folder) by default; PostgreSQL by URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from grader import jsonio
from grader.hosting.errors import HostingError

DB_FILE = "grader.sqlite3"
#: JSON columns are written and read back through grader.jsonio (ASCII: PostgreSQL's json type refuses a raw NUL).
_JSON_CODEC: dict[str, Any] = {"json_serializer": partial(jsonio.dumps, ensure_ascii=True), "json_deserializer": jsonio.loads}


def database_url(state_dir: Path, url: str | None) -> str:
    """``url`` as given (``postgresql://`` means psycopg 3), else SQLite in the state folder."""
    if url is None:
        return f"sqlite:///{(state_dir / DB_FILE).resolve()}"
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the one writer; busy_timeout makes a writer wait instead of failing.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


@dataclass(frozen=True)
class PoolSize:
    """How many PostgreSQL connections one engine holds: ``size`` kept open once used, up to ``overflow`` more while busy.

    A one-competition server keeps the default (10 + 20); a server of many competitions gives each a share of one
    server-wide budget (:func:`grader.hosting.serve_many.competition_pool`), so that twenty competitions do not ask
    PostgreSQL for 600 connections (its default ``max_connections`` is 100).
    """

    size: int = 10
    overflow: int = 20

    @property
    def most(self) -> int:
        """The most connections the engine opens at once."""
        return self.size + self.overflow


def make_engine(url: str, pool: PoolSize | None = None) -> Engine:
    """An engine for ``url`` (already normalised by :func:`database_url`); ``pool``: PostgreSQL's pool (None: the default)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, pool_pre_ping=True, **_JSON_CODEC)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    pool = pool or PoolSize()
    return create_engine(url, pool_pre_ping=True, pool_size=pool.size, max_overflow=pool.overflow, **_JSON_CODEC)


#: The competition database's migrations.
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def _alembic_config(scripts: Path = MIGRATIONS) -> Config:
    config = Config()
    config.set_main_option("script_location", str(scripts))
    return config


def migrate(engine: Engine, revision: str = "head", *, scripts: Path = MIGRATIONS) -> str:
    """Bring the schema to ``revision`` (the newest by default; Alembic, programmatically); return the revision reached.

    On SQLite, foreign-key enforcement is off while the migrations run: a batch
    migration rebuilds a table (copy, drop, rename), and dropping a table other
    rows refer to would otherwise fail. Every reference is checked before the
    commit instead (``PRAGMA foreign_key_check``).
    """
    config = _alembic_config(scripts)
    sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.connect() as connection:
            if sqlite:  # outside any transaction: SQLite ignores this pragma inside one
                connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
                connection.commit()
            try:
                with connection.begin():
                    config.attributes["connection"] = connection
                    command.upgrade(config, revision)
                    if sqlite and (broken := connection.exec_driver_sql("PRAGMA foreign_key_check").first()) is not None:
                        raise HostingError(f"database {engine.url}: a migration left a broken reference in table {broken[0]}")
                    return str(MigrationContext.configure(connection).get_current_revision())
            finally:
                if sqlite:
                    connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                    connection.commit()
    except SQLAlchemyError as error:
        raise HostingError(
            f"database {engine.url.render_as_string(hide_password=True)}: cannot migrate: {error.__class__.__name__}: {str(error).splitlines()[0]}"
        ) from None


def head_revision() -> str:
    """The newest schema revision this grader knows."""
    return str(ScriptDirectory.from_config(_alembic_config()).get_current_head())


class Database:
    """An engine with its session factory."""

    def __init__(self, url: str, pool: PoolSize | None = None) -> None:
        self.url = url
        self.engine = make_engine(url, pool)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on success, rolled back on error."""
        with self.sessions() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(state_dir: Path, url: str | None = None, *, upgrade: bool = True, pool: PoolSize | None = None) -> Database:
    """Open (and migrate) the competition's database (``pool``: its PostgreSQL connection pool; None: the default)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    database = Database(database_url(state_dir, url), pool)
    if upgrade:
        migrate(database.engine)
    return database
