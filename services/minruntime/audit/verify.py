"""Compare a replayed shadow with the live projections: per-table checksums, differing rows.

Both sides are read in the caller's transaction (a REPEATABLE READ snapshot taken before the
log was read), so the live state compared is exactly the state the replayed log produced.
A projection's *content* is every column except bookkeeping (``updated_at``: when a row was
written; ``seq``: the order rows were numbered in), which two correct replays need not share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import sqlalchemy as sa
from sqlalchemy import Connection

from minruntime.store.shadows import BOOKKEEPING_COLUMNS, PROJECTIONS, Shadow
from minruntime.store.tables import STATE_SCHEMA, metadata

SHOWN_ROWS: Final = 10


@dataclass(frozen=True)
class RowDifference:
    """One key whose row differs: its text on each side (None: absent there)."""

    key: str
    live: str | None
    replay: str | None


@dataclass(frozen=True)
class TableCheck:
    """One projection table compared."""

    table: str
    live_rows: int
    replay_rows: int
    live_checksum: str
    replay_checksum: str
    differences: list[RowDifference] = field(default_factory=list)
    # How many keys differ in all (the list shows at most SHOWN_ROWS).
    differing_keys: int = 0

    @property
    def equal(self) -> bool:
        return self.live_checksum == self.replay_checksum and self.live_rows == self.replay_rows


def content_columns(table: str) -> list[str]:
    """The columns that make up a projection row's content, in table order."""
    return [
        column.name
        for column in metadata.tables[f"{STATE_SCHEMA}.{table}"].columns
        if column.name not in BOOKKEEPING_COLUMNS
    ]


def checksum(conn: Connection, schema: str, table: str) -> tuple[int, str]:
    """(rows, md5 over the rows' content in key order) of ``schema.table``."""
    columns = ", ".join(f'"{column}"' for column in content_columns(table))
    keys = ", ".join(f'"{key}"' for key in PROJECTIONS[table])
    row = conn.execute(
        sa.text(
            f"SELECT count(*), md5(COALESCE(string_agg(ROW({columns})::text, E'\\n'"
            f" ORDER BY {keys}), '')) FROM {schema}.{table}"
        )
    ).one()
    return int(row[0]), str(row[1])


def compare(conn: Connection, shadow: Shadow, tables: list[str] | None = None) -> list[TableCheck]:
    """Compare every projection table of ``shadow`` with the live one."""
    return compare_schemas(conn, STATE_SCHEMA, shadow.state_schema, tables)


def compare_schemas(
    conn: Connection, live_schema: str, replay_schema: str, tables: list[str] | None = None
) -> list[TableCheck]:
    """Compare the projection tables of two state schemas (the first on the "live" side)."""
    checks = []
    for table in tables or list(PROJECTIONS):
        live_rows, live_sum = checksum(conn, live_schema, table)
        replay_rows, replay_sum = checksum(conn, replay_schema, table)
        if (live_rows, live_sum) == (replay_rows, replay_sum):
            checks.append(TableCheck(table, live_rows, replay_rows, live_sum, replay_sum))
            continue
        differences, total = _differences(conn, live_schema, replay_schema, table)
        checks.append(
            TableCheck(table, live_rows, replay_rows, live_sum, replay_sum, differences, total)
        )
    return checks


def _differences(
    conn: Connection, live_schema: str, replay_schema: str, table: str
) -> tuple[list[RowDifference], int]:
    columns = ", ".join(f'"{column}"' for column in content_columns(table))
    keys = PROJECTIONS[table]
    key_text = " || '/' || ".join(f'"{key}"::text' for key in keys)
    live = f"{live_schema}.{table}"
    replayed = f"{replay_schema}.{table}"
    rows = conn.execute(
        sa.text(
            f"WITH only_live AS (SELECT {columns} FROM {live}"
            f" EXCEPT ALL SELECT {columns} FROM {replayed}),"
            f" only_replay AS (SELECT {columns} FROM {replayed}"
            f" EXCEPT ALL SELECT {columns} FROM {live}),"
            f" sides AS (SELECT {key_text} AS key, ROW({columns})::text AS live, NULL AS replay"
            f" FROM only_live UNION ALL"
            f" SELECT {key_text}, NULL, ROW({columns})::text FROM only_replay)"
            " SELECT key, max(live) AS live, max(replay) AS replay, count(*) OVER () AS total"
            " FROM sides GROUP BY key ORDER BY key LIMIT :shown"
        ),
        {"shown": SHOWN_ROWS},
    ).all()
    total = int(rows[0].total) if rows else 0
    return [RowDifference(row.key, row.live, row.replay) for row in rows], total
