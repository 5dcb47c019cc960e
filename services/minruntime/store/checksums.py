"""Checksums of projection tables: what ``replay --verify`` and snapshot checks compare.

A projection's *content* is every column except bookkeeping (``updated_at``: when a row was
written; ``seq``: the order rows were numbered in), which two correct replays need not share.
A checksum is the row count and an md5 over the rows' content in key order: over each row's
64-bit hash (``hash_record_extended``: every column's type's own hash of its value, the one
hash partitioning relies on, stable across servers; no row text, a third of the time), so
rows equal as ``unmatched`` says hash alike (a numeric ``1.0`` as ``1``); the differences
of two tables are the keys whose rows differ, with each side's row as text. ``uids`` narrows
a podgroup table (every one has a ``uid`` column) to those podgroups.

Whether two tables are equal is one set operation (``unmatched``): the two sides joined on the
projection's key (``shadows.PROJECTIONS``, a unique key of every table: a test says so), each
pair of rows compared column by column (``IS DISTINCT FROM``: each column's type's equality,
NULLs equal, as ``EXCEPT`` compares), the rows without an equal partner counted. Exact (no
digest can collide), one pass over each side and no row text, so a verification computes the
md5 of one side only when the sides are equal. (Grouping both sides by every content column,
as before, planned a sort of both sides' whole rows once they outgrew ``work_mem``: 1.2–1.3 s
for 240,000 podgroups against 0.7 s joined on the key, docs/benchmarks.md.)
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
    by one join in PostgreSQL: equal tables give (n, n, 0). A row whose key is on one side
    only counts once; a key on both sides with other content counts twice (a row on each
    side unmatched), as a set difference of the whole rows would count them. Rows are equal
    as ``EXCEPT`` says (each column's type's equality; NULLs equal)."""
    columns = content_columns(table)
    keys = PROJECTIONS[table]
    listed = ", ".join(f'"{column}"' for column in columns)
    where = _where(table, uids, part)
    on = " AND ".join(f'a."{key}" = b."{key}"' for key in keys)
    left = f'a."{keys[0]}"'
    right = f'b."{keys[0]}"'
    row_a = ", ".join(f'a."{column}"' for column in columns)
    row_b = ", ".join(f'b."{column}"' for column in columns)
    row = conn.execute(
        sa.text(
            f"SELECT count({left}), count({right}), COALESCE(sum(CASE"
            f" WHEN {left} IS NULL OR {right} IS NULL THEN 1"
            f" WHEN ROW({row_a}) IS DISTINCT FROM ROW({row_b}) THEN 2 ELSE 0 END), 0)"
            f" FROM (SELECT {listed} FROM {first.schema}.{table} WHERE {where}) a"
            f" FULL JOIN (SELECT {listed} FROM {second.schema}.{table} WHERE {where}) b"
            f" ON {on}"
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
