"""Checksums of projection tables: what ``replay --verify`` and snapshot checks compare.

A projection's *content* is every column except bookkeeping (``updated_at``: when a row was
written; ``seq``: the order rows were numbered in), which two correct replays need not share.
A checksum is the row count and an md5 over the rows' content in key order: over each row's
64-bit hash (``hash_record_extended``: every column's type's own hash of its value, the one
hash partitioning relies on, stable across servers; no row text, a third of the time), so
rows equal as ``unmatched`` says hash alike (a numeric ``1.0`` as ``1``); the differences
of two tables are the keys whose rows differ, with each side's row as text. ``uids`` narrows
a podgroup table (every one has a ``uid`` column) to those podgroups.

Whether two tables are equal is one set operation (``unmatched``): both sides' content rows in
one hash aggregate, grouped by every content column, the groups whose counts differ counted.
Exact (no digest can collide) and one pass over each side with no sort and no row text, so a
verification computes the md5 of one side only when the sides are equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import sqlalchemy as sa
from sqlalchemy import Connection

from minruntime.store.parts import Part
from minruntime.store.schema import StateTables
from minruntime.store.shadows import BOOKKEEPING_COLUMNS, PROJECTIONS
from minruntime.store.tables import STATE_SCHEMA, metadata

# (key, row on the first side, row on the second side; None: absent there)
Difference = tuple[str, str | None, str | None]
_ALL: Final = "TRUE"
_OF_UIDS: Final = "uid = ANY(CAST(:uids AS text[]))"


def content_columns(table: str) -> list[str]:
    """The columns that make up a projection row's content, in table order."""
    return [
        column.name
        for column in metadata.tables[f"{STATE_SCHEMA}.{table}"].columns
        if column.name not in BOOKKEEPING_COLUMNS
    ]


def _where(table: str, uids: Sequence[str] | None, part: Part | None) -> str:
    where = _ALL if uids is None else _OF_UIDS
    if part is None:
        return where
    rows = part.rows_of(table)
    if rows is None:
        raise ValueError(f"part {part.index} of {part.of} holds no rows of {table}")
    return f"{where} AND {rows}"


def checksum(
    conn: Connection,
    tables: StateTables,
    table: str,
    uids: Sequence[str] | None = None,
    part: Part | None = None,
) -> tuple[int, str]:
    """(rows, md5 over the rows' hashes in key order) of ``table`` in ``tables``; ``part``:
    of the rows of that part of the state only (``store.parts``)."""
    columns = ", ".join(f'"{column}"' for column in content_columns(table))
    keys = ", ".join(f'"{key}"' for key in PROJECTIONS[table])
    row = conn.execute(
        sa.text(
            "SELECT count(*), md5(COALESCE(string_agg("
            f"hash_record_extended(ROW({columns}), 0)::text, E'\\n' ORDER BY {keys}), ''))"
            f" FROM {tables.schema}.{table}"
            f" WHERE {_where(table, uids, part)}"
        ),
        {} if uids is None else {"uids": list(uids)},
    ).one()
    return int(row[0]), str(row[1])


def unmatched(
    conn: Connection,
    first: StateTables,
    second: StateTables,
    table: str,
    uids: Sequence[str] | None = None,
    part: Part | None = None,
) -> tuple[int, int, int]:
    """(rows of ``first``, rows of ``second``, content rows not matched on the other side),
    by one set operation in PostgreSQL: equal tables give (n, n, 0). Rows are equal as
    ``EXCEPT`` and ``GROUP BY`` say (each column's type's equality; NULLs equal)."""
    columns = ", ".join(f'"{column}"' for column in content_columns(table))
    where = _where(table, uids, part)
    row = conn.execute(
        sa.text(
            "SELECT COALESCE(sum(a), 0), COALESCE(sum(b), 0),"
            " COALESCE(sum(abs(a - b)), 0) FROM ("
            "SELECT count(*) FILTER (WHERE side) AS a, count(*) FILTER (WHERE NOT side) AS b"
            f" FROM (SELECT {columns}, TRUE AS side FROM {first.schema}.{table} WHERE {where}"
            f" UNION ALL SELECT {columns}, FALSE FROM {second.schema}.{table} WHERE {where}) u"
            f" GROUP BY {columns}) g"
        ),
        {} if uids is None else {"uids": list(uids)},
    ).one()
    return int(row[0]), int(row[1]), int(row[2])


def differences(
    conn: Connection,
    first: StateTables,
    second: StateTables,
    table: str,
    shown: int,
    uids: Sequence[str] | None = None,
    part: Part | None = None,
) -> tuple[list[Difference], int]:
    """Up to ``shown`` keys whose rows differ between the two sides (key order), and how many."""
    columns = ", ".join(f'"{column}"' for column in content_columns(table))
    keys = PROJECTIONS[table]
    key_text = " || '/' || ".join(f'"{key}"::text' for key in keys)
    where = _where(table, uids, part)
    one = f"(SELECT * FROM {first.schema}.{table} WHERE {where}) a"
    two = f"(SELECT * FROM {second.schema}.{table} WHERE {where}) b"
    rows = conn.execute(
        sa.text(
            f"WITH only_first AS (SELECT {columns} FROM {one}"
            f" EXCEPT ALL SELECT {columns} FROM {two}),"
            f" only_second AS (SELECT {columns} FROM {two}"
            f" EXCEPT ALL SELECT {columns} FROM {one}),"
            f" sides AS (SELECT {key_text} AS key, ROW({columns})::text AS first, NULL AS second"
            f" FROM only_first UNION ALL"
            f" SELECT {key_text}, NULL, ROW({columns})::text FROM only_second)"
            " SELECT key, max(first) AS first, max(second) AS second, count(*) OVER () AS total"
            " FROM sides GROUP BY key ORDER BY key LIMIT :shown"
        ),
        {"shown": shown, **({} if uids is None else {"uids": list(uids)})},
    ).all()
    total = int(rows[0].total) if rows else 0
    return [(row.key, row.first, row.second) for row in rows], total
