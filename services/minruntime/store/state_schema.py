"""Names a shadow's schemas may take.

Replays, as-of answers and what-ifs run the projection code (``minruntime.ingest``) against a
*shadow* schema — a copy of the tables under another name — by handing it that schema's
``StateTables`` (``store.schema.state_tables``). The name is spliced into SQL text, so it is
checked here first.
"""

from __future__ import annotations

import re
from typing import Final

from minruntime.errors import SchemaNameError
from minruntime.store.tables import READ_SCHEMA, STATE_SCHEMA

# Lower-case unquoted identifiers only: the name is spliced into SQL text.
_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,47}")
_RESERVED: Final = frozenset({STATE_SCHEMA, READ_SCHEMA, "public", "information_schema"})


def check_schema_name(name: str) -> str:
    """Return ``name`` if it may name a shadow schema; SchemaNameError (one line) otherwise."""
    if not _NAME.fullmatch(name):
        raise SchemaNameError(
            f"schema name {name!r} must be lower-case letters, digits and '_' "
            "(at most 48, not starting with a digit)"
        )
    if name in _RESERVED or name.startswith("pg_"):
        raise SchemaNameError(f"schema name {name!r} is reserved")
    return name
