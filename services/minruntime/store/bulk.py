"""Multi-row writes as one statement: ``COPY ... FROM STDIN``, or one JSON array per column.

A batch of thousands of rows then costs one round trip and one parse, instead of one
statement per row (psycopg's executemany pipelines, but still binds and executes per row).
Plain inserts stream the rows with COPY (formatted in C by psycopg); upserts, updates and
deletes, which COPY cannot express, send each column as one JSON array (serialised in Rust by
pydantic-core) that the statement unpacks side by side with ``ROWS FROM
(json_array_elements_text(...), ...)``. Either way every value reaches its column as text,
through the column type's input function.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from operator import itemgetter
from typing import Any, Final

import sqlalchemy as sa
from pydantic_core import to_json
from sqlalchemy import Connection

from minruntime.store.engine import driver_cursor


def rows_insert(
    table: str,
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
    *,
    conflict: str = "",
) -> tuple[str, dict[str, Any]]:
    """``INSERT INTO table (...) SELECT ... FROM ROWS FROM (...)`` (psycopg placeholders) and
    its parameters: one JSON array per column.

    ``columns`` maps each column to its PostgreSQL type (see ``_unpacked``).
    """
    source, names, params = _unpacked(columns, rows)
    selected = ", ".join(_cast(name, kind) for name, kind in columns.items())
    statement = f"INSERT INTO {table} ({names}) SELECT {selected} FROM {source} {conflict}"
    return statement, params


def update_many(
    conn: Connection,
    table: sa.Table,
    keys: Sequence[str],
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
) -> None:
    """Update rows in place, each matched by its ``keys`` (some of ``columns``): one statement
    (``update_statement``). Nothing when empty."""
    if rows:
        execute_statement(conn, *update_statement(table, keys, columns, rows))


def update_statement(
    table: sa.Table,
    keys: Sequence[str],
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
) -> tuple[str, dict[str, Any]]:
    """``UPDATE table SET c = u.c, ... FROM ROWS FROM (...) AS u(...) WHERE table.k = u.k`` (and
    the first key's probe), the rows sent as ``rows_insert`` sends them, and their number
    (``_unpacked(counted=True)``), and its parameters."""
    source, _, params = _unpacked(columns, rows, counted=True)
    assignments = ", ".join(
        f'"{name}" = {_cast(name, kind)}' for name, kind in columns.items() if name not in keys
    )
    matches = " AND ".join(f't."{key}" = u."{key}"' for key in keys)
    probe = _probe(keys[0], columns[keys[0]])
    where = f"{probe} AND {matches}"
    return f"UPDATE {table.fullname} AS t SET {assignments} FROM {source} WHERE {where}", params


def delete_many(
    conn: Connection,
    table: sa.Table,
    columns: Mapping[str, str],
    rows: Sequence[Mapping[str, Any]],
) -> None:
    """Delete the rows whose ``columns`` (a key) equal those of one of ``rows``: one statement
    (``delete_statement``). Nothing when empty."""
    if rows:
        execute_statement(conn, *delete_statement(table, columns, rows))


def delete_statement(
    table: sa.Table, columns: Mapping[str, str], rows: Sequence[Mapping[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """``DELETE FROM table USING ROWS FROM (...) AS u(...) WHERE table.c = u.c ...`` (and the
    first column's probe), and its parameters."""
    source, _, params = _unpacked(columns, rows, counted=True)
    matches = " AND ".join(f't."{name}" = {_cast(name, kind)}' for name, kind in columns.items())
    probe = _probe(*next(iter(columns.items())))
    return f"DELETE FROM {table.fullname} AS t USING {source} WHERE {probe} AND {matches}", params


def json_list(values: Iterable[Any]) -> str:
    """``values`` as one JSON array (text), for a statement that unpacks it with
    ``json_array_elements_text``: serialised in Rust, where psycopg quotes each element of a
    Python list in Python (a batch sends thousands of ids)."""
    return to_json(list(values)).decode()


def _interval_text(value: timedelta) -> str:
    # What psycopg sends for a timedelta: days and the rest apart, both exact.
    return f"{value.days} days {value.seconds}.{value.microseconds:06d} seconds"


# Values a JSON array cannot carry as their type's input text: each as that text (numeric as
# str() of the number, exactly as COPY writes it; Decimal would become a string anyway).
_TO_TEXT: Final[dict[str, Callable[[Any], Any]]] = {
    "numeric": str,
    "interval": _interval_text,
}


# The unpacked rows' number, as a row source beside them (``_unpacked(counted=True)``).
_COUNT_COLUMN: Final = "rows_unpacked"


def _unpacked(
    columns: Mapping[str, str], rows: Sequence[Mapping[str, Any]], *, counted: bool = False
) -> tuple[str, str, dict[str, Any]]:
    """The row source ``ROWS FROM (...) AS u(...)``, the quoted column names and its
    parameters: one JSON array per column.

    Each array is serialised in Rust (pydantic-core), where psycopg's array dumpers pack
    element by element in Python; ``json_array_elements_text`` gives each element as text (a
    JSON null as NULL, a jsonb value as its JSON text, a str as itself), which ``_cast`` turns
    into the column's type. A value JSON cannot hold (an unpaired surrogate) raises
    ValueError, as psycopg's encoder does.

    ``counted``: the source also holds ``generate_series(1, <the number of rows>)``, whose
    estimate the planner takes for the source's (a function's rows are otherwise estimated
    at 100; planned unprepared it is the number itself, prepared 1,000). An update or a delete
    joins the unpacked rows to the rows its probe finds, and with 100 for 2,500 the planner
    could choose a nested loop that re-reads every probed row for each unpacked row: at
    241,501 events the processor's pod updates took 0.8 s a batch instead of 20 ms
    (docs/benchmarks.md, "A plan that flipped"). The series has as many rows as the arrays,
    so it adds no row.
    """
    # map over itemgetter: the rows' values of one column without a Python frame per row.
    values = [list(map(itemgetter(name), rows)) for name in columns]
    return _unpacked_columns(columns, values, len(rows), counted=counted)


def _unpacked_columns(
    columns: Mapping[str, str],
    column_values: Iterable[Sequence[Any]],
    count: int,
    *,
    counted: bool = False,
) -> tuple[str, str, dict[str, Any]]:
    """``_unpacked`` of ``count`` rows given column by column (``column_values``: each
    column's values in ``columns``' order)."""
    names = ", ".join(f'"{name}"' for name in columns)
    functions = ", ".join(f"json_array_elements_text(%({name})s::json)" for name in columns)
    params: dict[str, Any] = {}
    aliases = names
    if counted:
        functions += f", generate_series(1, %({_COUNT_COLUMN})s::integer)"
        aliases += f', "{_COUNT_COLUMN}"'
        params[_COUNT_COLUMN] = count
    for (name, kind), values in zip(columns.items(), column_values, strict=True):
        convert = _TO_TEXT.get(kind)
        if convert is not None:
            values = [
                value if value is None or isinstance(value, str) else convert(value)
                for value in values
            ]
        params[name] = json_list(values)
    return f"ROWS FROM ({functions}) AS u({aliases})", names, params


def _probe(name: str, kind: str) -> str:
    """``t.name = ANY(<the rows' values of name, one array made once>)``: what lets an update or
    a delete read the table through an index on ``name``.

    Matched only against the unpacked rows (``t.k = u.k``), the table was planned as a hash
    join over a scan of all of it (the function's rows are estimated at 100): every batch's
    pod update read every stored pod, a cost per batch that grew with the table (7,478 pods:
    2.7 ms for 30 rows; docs/pipeline.md).
    """
    values = f"json_array_elements_text(%({name})s::json)"
    if kind != "text":
        values = f"{values}::{kind}"
    return f't."{name}" = ANY(ARRAY(SELECT {values}))'


def _cast(name: str, kind: str) -> str:
    """Column ``name`` of the unpacked rows (text), cast to ``kind``."""
    return f'u."{name}"' if kind == "text" else f'u."{name}"::{kind}'


def execute_statement(conn: Connection, statement: str, params: Mapping[str, Any]) -> None:
    """``statement`` (psycopg placeholders) on the driver's cursor, its rows not read (inside
    ``engine.pipelined``: sent, its answer awaited with the block's)."""
    with driver_cursor(conn) as cursor:
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
    format): psycopg formats each row in C. Every value reaches the column through the column
    type's input function either way (jsonb and numeric as text, as the JSON path sends
    them). With a conflict clause, one ``INSERT ... SELECT FROM ROWS FROM (...)`` (COPY
    cannot say ON CONFLICT).

    ``table`` is a table bound to its schema (``StateTables``).
    """
    if not rows:
        return
    name = table.fullname
    if not conflict:
        names = ", ".join(f'"{name}"' for name in columns)
        kinds = list(columns.items())
        as_text = [(i, kind) for i, (_, kind) in enumerate(kinds) if _wire_type(kind) != kind]
        # A row's values in the columns' order, taken in C (a one-column getter gives the
        # value, not a tuple of it).
        getter = itemgetter(*columns) if len(columns) > 1 else _one_value(*columns)
        with (
            driver_cursor(conn) as cursor,
            cursor.copy(f"COPY {name} ({names}) FROM STDIN") as copy,
        ):
            write = copy.write_row
            if not as_text:
                for row in rows:
                    write(getter(row))
                return
            for row in rows:
                values = list(getter(row))
                for i, kind in as_text:
                    values[i] = _wire_value(values[i], kind, True)
                write(values)
        return
    statement, params = rows_insert(name, columns, rows, conflict=conflict)
    execute_statement(conn, statement, params)


def _one_value(column: str) -> Callable[[Mapping[str, Any]], tuple[Any]]:
    return lambda row: (row[column],)


def insert_tuples(
    conn: Connection,
    table: sa.Table,
    columns: Mapping[str, str],
    rows: Sequence[Sequence[Any]],
    *,
    conflict: str,
) -> None:
    """``insert_many`` with a ``conflict`` clause, of rows given as their values in
    ``columns``' order (tuples: no mapping built per row, and the columns taken apart in C by
    ``zip``; the projection writes a podgroup's 29 columns for every podgroup a batch
    changes). Nothing when empty."""
    if not rows:
        return
    source, names, params = _unpacked_columns(columns, zip(*rows, strict=True), len(rows))
    selected = ", ".join(_cast(name, kind) for name, kind in columns.items())
    statement = f"INSERT INTO {table.fullname} ({names}) SELECT {selected} FROM {source} {conflict}"
    execute_statement(conn, statement, params)


def _wire_type(kind: str) -> str:
    return "text" if kind in ("jsonb", "numeric") else kind


def _wire_value(value: Any, kind: str, as_text: bool) -> Any:
    if value is None or not as_text or isinstance(value, str):
        return value
    return json.dumps(value) if kind == "jsonb" else str(value)
