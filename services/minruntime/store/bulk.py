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
    arrays, names, params = _unnested(columns, rows)
    selected = ", ".join(_cast(name, kind) for name, kind in columns.items())
    statement = (
        f"INSERT INTO {table} ({names}) SELECT {selected} FROM unnest({arrays})"
        f" AS u({names}) {conflict}"
    )
    return statement, params


def update_many(
    conn: Connection,
    table: sa.Table,
    keys: Sequence[str],
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
) -> None:
    """Update rows in place, each matched by its ``keys`` (some of ``columns``): one statement.

    ``UPDATE table SET c = u.c, ... FROM unnest(...) AS u(...) WHERE table.k = u.k``, the rows
    sent as ``unnest_insert`` sends them. Nothing when empty.
    """
    if not rows:
        return
    arrays, names, params = _unnested(columns, rows)
    assignments = ", ".join(
        f'"{name}" = {_cast(name, kind)}' for name, kind in columns.items() if name not in keys
    )
    matches = " AND ".join(f't."{key}" = u."{key}"' for key in keys)
    _execute(
        conn,
        f"UPDATE {table.fullname} AS t SET {assignments} FROM unnest({arrays}) AS u({names})"
        f" WHERE {matches}",
        params,
    )


def delete_many(
    conn: Connection,
    table: sa.Table,
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
) -> None:
    """Delete the rows whose ``columns`` (a key) equal those of one of ``rows``: one statement."""
    if not rows:
        return
    arrays, names, params = _unnested(columns, rows)
    matches = " AND ".join(f't."{name}" = {_cast(name, kind)}' for name, kind in columns.items())
    _execute(
        conn,
        f"DELETE FROM {table.fullname} AS t USING unnest({arrays}) AS u({names}) WHERE {matches}",
        params,
    )


def _unnested(
    columns: Mapping[str, str], rows: Sequence[Mapping[str, Any]]
) -> tuple[str, str, dict[str, list[Any]]]:
    """The ``unnest(...)`` arguments, the quoted column names and one array per column."""
    wire = {name: _wire_type(kind) for name, kind in columns.items()}
    arrays = ", ".join(f"CAST(%({name})b AS {wire[name]}[])" for name in columns)
    names = ", ".join(f'"{name}"' for name in columns)
    params = {
        name: [_wire_value(row[name], kind, wire[name] != kind) for row in rows]
        for name, kind in columns.items()
    }
    return arrays, names, params


def _cast(name: str, kind: str) -> str:
    """Column ``name`` of the unnested rows, cast back to ``kind`` when it travelled as text."""
    return f'u."{name}"::{kind}' if _wire_type(kind) != kind else f'u."{name}"'


def _execute(conn: Connection, statement: str, params: Mapping[str, Any]) -> None:
    # Straight to psycopg, in the same transaction. Binary parameters (%b) send each array
    # without the per-element quoting of the text format (several times faster here).
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        cursor.execute(statement, params)


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
    _execute(conn, statement, params)


def _wire_type(kind: str) -> str:
    return "text" if kind in ("jsonb", "numeric") else kind


def _wire_value(value: Any, kind: str, as_text: bool) -> Any:
    if value is None or not as_text or isinstance(value, str):
        return value
    return json.dumps(value) if kind == "jsonb" else str(value)
