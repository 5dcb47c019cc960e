"""Which schema a connection's projection code reads and writes: the live one, or a shadow.

Replays, as-of answers and what-ifs run the projection code (``minruntime.ingest``) against a
*shadow* schema — a copy of the tables under another name — by marking the connection with
``use_state_schema``; the store then works on that schema's ``StateTables``
(``store.schema.tables_of``), whose statements were bound to it once. A connection that was
never marked uses the live schema.
"""

from __future__ import annotations

import re
from typing import Final

from sqlalchemy import Connection

from minruntime.store.tables import READ_SCHEMA, STATE_SCHEMA

_OPTION: Final = "minruntime_state_schema"
_PREFIX: Final = f"{STATE_SCHEMA}."
# Lower-case unquoted identifiers only: the name is spliced into SQL text.
_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,47}")
_RESERVED: Final = frozenset({STATE_SCHEMA, READ_SCHEMA, "public", "information_schema"})


def check_schema_name(name: str) -> str:
    """Return ``name`` if it may name a shadow schema; ValueError (one line) otherwise."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"schema name {name!r} must be lower-case letters, digits and '_' "
            "(at most 48, not starting with a digit)"
        )
    if name in _RESERVED or name.startswith("pg_"):
        raise ValueError(f"schema name {name!r} is reserved")
    return name


def use_state_schema(conn: Connection, schema: str) -> Connection:
    """Point the projection code run on ``conn`` at ``schema`` (modifies ``conn``; returns it)."""
    if schema != STATE_SCHEMA:
        check_schema_name(schema)
    return conn.execution_options(schema_translate_map={STATE_SCHEMA: schema}, **{_OPTION: schema})


def state_schema(conn: Connection) -> str:
    """The schema holding the state tables for ``conn`` (the live one unless marked)."""
    return str(conn.get_execution_options().get(_OPTION, STATE_SCHEMA))


def is_live(conn: Connection) -> bool:
    """True when ``conn`` writes the live state (side effects such as NOTIFY are wanted)."""
    return state_schema(conn) == STATE_SCHEMA
