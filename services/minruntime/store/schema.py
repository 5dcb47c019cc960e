"""``StateTables``: the state tables bound to one schema, the live one or a shadow.

Built once per schema (``state_tables``, for the live schema and the shadows most recently
used): every ``Table`` of ``store.tables`` is copied into a
``MetaData`` of that schema, and every hand-written statement of ``store/`` is bound to it the
first time it is used (``text``/``sql``) and kept. A store function takes the ``StateTables``
it works on, so one call never reads one schema and writes another.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

import sqlalchemy as sa

from minruntime.store.state_schema import check_schema_name
from minruntime.store.tables import NAMING_CONVENTION, STATE_SCHEMA, metadata

_PREFIX: Final = f"{STATE_SCHEMA}."


class StateTables:
    """The state tables of one schema, and the store's SQL bound to it."""

    def __init__(self, schema: str = STATE_SCHEMA) -> None:
        if schema != STATE_SCHEMA:
            check_schema_name(schema)
        self.schema = schema
        self.metadata = sa.MetaData(schema=schema, naming_convention=NAMING_CONVENTION)
        for table in metadata.sorted_tables:
            table.to_metadata(self.metadata, schema=schema)
        self._texts: dict[str, sa.TextClause] = {}
        self._sql: dict[str, str] = {}
        tables = self.metadata.tables
        self.podgroup_state = tables[f"{schema}.podgroup_state"]
        self.subgroup_state = tables[f"{schema}.subgroup_state"]
        self.pod_state = tables[f"{schema}.pod_state"]
        self.nominations = tables[f"{schema}.nominations"]
        self.requeue_decision_log = tables[f"{schema}.requeue_decision_log"]
        self.requeue_promises = tables[f"{schema}.requeue_promises"]
        self.checkpoint_handshakes = tables[f"{schema}.checkpoint_handshakes"]
        self.run_log = tables[f"{schema}.run_log"]
        self.event_log = tables[f"{schema}.event_log"]
        self.outbox = tables[f"{schema}.outbox"]

    @property
    def is_live(self) -> bool:
        """True for the live schema (side effects such as NOTIFY are wanted)."""
        return self.schema == STATE_SCHEMA

    def sql(self, statement: str) -> str:
        """``statement`` (naming ``minruntime_state.<table>``) for this schema, as a string."""
        bound = self._sql.get(statement)
        if bound is None:
            bound = statement.replace(_PREFIX, f"{self.schema}.")
            self._sql[statement] = bound
        return bound

    def text(self, statement: str) -> sa.TextClause:
        """``sql(statement)`` as a SQLAlchemy text clause (made once per statement)."""
        bound = self._texts.get(statement)
        if bound is None:
            bound = sa.text(self.sql(statement))
            self._texts[statement] = bound
        return bound


# The shadows' state tables most recently asked for, beside the live ones (kept for good):
# a process makes a shadow per answer, under a new name each time, and each ``StateTables``
# holds a copy of every table (~6,000 objects). Kept for every name, a process that answers
# question after question grows by that much an answer, and the collector's full passes grow
# with it (0.2 s in one answer, measured at the 16th answer of ``bench_asof.py``).
SHADOWS_KEPT: Final = 8
_RECENT: OrderedDict[str, StateTables] = OrderedDict()
_RECENT_LOCK: Final = threading.Lock()


def state_tables(schema: str = STATE_SCHEMA) -> StateTables:
    """The state tables bound to ``schema`` (built once per schema while it is among the
    ``SHADOWS_KEPT`` most recently used; SchemaNameError: a bad name)."""
    if schema == STATE_SCHEMA:
        return LIVE
    with _RECENT_LOCK:
        tables = _RECENT.get(schema)
        if tables is not None:
            _RECENT.move_to_end(schema)
            return tables
        tables = _RECENT[schema] = StateTables(schema)
        while len(_RECENT) > SHADOWS_KEPT:
            _RECENT.popitem(last=False)
        return tables


LIVE: Final = StateTables()
