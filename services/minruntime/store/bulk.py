"""Multi-row writes as one statement: ``COPY ... FROM STDIN``, or one array per column, unnested.

A batch of thousands of rows then costs one round trip and one parse, instead of one
statement per row (psycopg's executemany pipelines, but still binds and executes per row).
Plain inserts stream the rows with COPY (formatted in C by psycopg); upserts, which COPY
cannot express, send each column as one array to ``INSERT ... SELECT FROM unnest(...)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection


def unnest_insert(
    table: str,
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
    *,
    conflict: str = "",
) -> tuple[str, dict[str, list[Any]]]:
    """``INSERT INTO table (...) SELECT ... FROM unnest(...)`` (psycopg placeholders) and arrays.

    ``columns`` maps each column to its PostgreSQL type; jsonb and numeric travel as text
    (one array element type for values of mixed Python types) and are cast back per row.
    """
    wire = {name: _wire_type(kind) for name, kind in columns.items()}
    arrays = ", ".join(f"CAST(%({name})b AS {wire[name]}[])" for name in columns)
    selected = ", ".join(
        f'u."{name}"::{kind}' if wire[name] != kind else f'u."{name}"'
        for name, kind in columns.items()
    )
    names = ", ".join(f'"{name}"' for name in columns)
    statement = (
        f"INSERT INTO {table} ({names}) SELECT {selected} FROM unnest({arrays})"
        f" AS u({names}) {conflict}"
    )
    params = {
        name: [_wire_value(row[name], kind, wire[name] != kind) for row in rows]
        for name, kind in columns.items()
    }
    return statement, params


def insert_many(
    conn: Connection,
    table: sa.Table,
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
    *,
    conflict: str = "",
) -> None:
    """Insert ``rows`` (mappings keyed by column) in one statement; nothing when empty.

    Without a ``conflict`` clause the rows are streamed with ``COPY ... FROM STDIN`` (text
    format): psycopg formats each row in C, where the unnested arrays are built element by
    element in Python, so COPY is several times cheaper per row. Every value reaches the
    column through the column type's input function either way (jsonb and numeric as text,
    exactly as the array path casts them). With a conflict clause, one
    ``INSERT ... SELECT FROM unnest(...)`` (COPY cannot say ON CONFLICT).

    ``table`` is a table bound to its schema (``StateTables``).
    """
    if not rows:
        return
    name = table.fullname
    # Straight to psycopg, in the same transaction.
    driver = conn.connection.driver_connection
    assert driver is not None
    if not conflict:
        names = ", ".join(f'"{name}"' for name in columns)
        kinds = list(columns.items())
        as_text = [(i, kind) for i, (_, kind) in enumerate(kinds) if _wire_type(kind) != kind]
        with (
            driver.cursor() as cursor,
            cursor.copy(f"COPY {name} ({names}) FROM STDIN") as copy,
        ):
            for row in rows:
                values = [row[name] for name in columns]
                for i, kind in as_text:
                    values[i] = _wire_value(values[i], kind, True)
                copy.write_row(values)
        return
    statement, params = unnest_insert(name, columns, rows, conflict=conflict)
    # Binary parameters (%b) send each array without the per-element quoting of the text
    # format (several times faster here).
    with driver.cursor() as cursor:
        cursor.execute(statement, params)


def _wire_type(kind: str) -> str:
    return "text" if kind in ("jsonb", "numeric") else kind


def _wire_value(value: Any, kind: str, as_text: bool) -> Any:
    if value is None or not as_text or isinstance(value, str):
        return value
    return json.dumps(value) if kind == "jsonb" else str(value)
