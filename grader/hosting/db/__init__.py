"""The hosting database: SQLAlchemy 2 models, engine and session, migrations run at start."""
