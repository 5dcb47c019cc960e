"""SQLAlchemy tables, the database engine, and the SQL read surface (views, functions, roles)."""

from minruntime.store.engine import engine_from, sqlalchemy_url
from minruntime.store.tables import READ_SCHEMA, STATE_SCHEMA, metadata

__all__ = ["READ_SCHEMA", "STATE_SCHEMA", "engine_from", "metadata", "sqlalchemy_url"]
