"""SQLAlchemy tables, the database engine, and the SQL read surface (views, functions, roles)."""

from minruntime.store.engine import engine_from
from minruntime.store.tables import STATE_SCHEMA, metadata

__all__ = ["STATE_SCHEMA", "engine_from", "metadata"]
