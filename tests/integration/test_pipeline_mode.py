"""``store.engine.pipelined`` on the real PostgreSQL: driver cursors only, anything else refused.

In psycopg's pipeline mode SQLAlchemy sends its statement but reads the result before the
answer came: a query gave no rows, silently. Every engine ``engine_from`` makes now refuses a
SQLAlchemy statement while its connection is in pipeline mode, naming it, before sending it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
import sqlalchemy as sa

from minruntime.health.outage import storage_transient
from minruntime.store.engine import (
    bounded_idle_transactions,
    driver_cursor,
    driver_rows,
    pipelined,
)
from minruntime.store.failures import is_permanent


def in_a_pipeline(engine: sa.Engine, run: Callable[[sa.Connection], object]) -> None:
    """``run`` inside ``pipelined``, in a transaction of ``engine``."""
    with engine.begin() as conn, pipelined(conn):
        run(conn)


def test_a_sqlalchemy_statement_inside_a_pipeline_is_refused_naming_it(engine: sa.Engine) -> None:
    for run in (
        lambda conn: conn.execute(sa.text("SELECT 41 AS refused")),
        lambda conn: conn.exec_driver_sql("SELECT 42 AS refused"),
    ):
        with pytest.raises(RuntimeError) as refused:
            in_a_pipeline(engine, run)
        assert "inside store.engine.pipelined would return no rows" in str(refused.value)
        assert "AS refused" in str(refused.value)
        # A bug: the processor neither dead-letters the record nor waits; it stops loudly.
        assert not is_permanent(refused.value)
        assert not storage_transient(refused.value)
    # The engines made from it too (the processor's, whose transactions are bounded); and the
    # connection is fine afterwards: out of the block, SQLAlchemy's statements run as ever.
    bounded = bounded_idle_transactions(engine, 5.0)
    with pytest.raises(RuntimeError, match="SELECT 43"):
        in_a_pipeline(bounded, lambda conn: conn.execute(sa.text("SELECT 43")))
    with bounded.begin() as conn:
        assert conn.execute(sa.text("SELECT 44")).scalar_one() == 44
        assert conn.exec_driver_sql("SHOW lock_timeout").scalar_one() == "5s"


def test_nothing_sent_before_the_refusal_is_lost_or_committed(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TEMPORARY TABLE sent (n integer)")
        conn.commit()

        def sent_then_refused() -> None:
            with conn.begin(), pipelined(conn):
                with driver_cursor(conn) as cursor:
                    cursor.execute("INSERT INTO sent VALUES (1)")
                conn.execute(sa.text("INSERT INTO sent VALUES (2)"))

        with pytest.raises(RuntimeError):
            sent_then_refused()
        # The caller's transaction rolled back what the block had sent.
        assert conn.exec_driver_sql("SELECT count(*) FROM sent").scalar_one() == 0


def test_a_driver_cursor_query_inside_a_pipeline_returns_its_rows(engine: sa.Engine) -> None:
    with (
        engine.begin() as conn,
        driver_cursor(conn) as inside,
        driver_cursor(conn) as after,
    ):
        with pipelined(conn):
            inside.execute("SELECT n FROM generate_series(1, 3) AS n")
            after.execute("SELECT %(word)s::text", {"word": "read after the block"})
            assert inside.fetchall() == [(1,), (2,), (3,)]
        assert after.fetchall() == [("read after the block",)]


def test_nested_blocks_are_one_pipeline_and_refuse_sqlalchemy_throughout(
    engine: sa.Engine,
) -> None:
    driver = None
    with engine.begin() as conn, driver_cursor(conn) as outer, driver_cursor(conn) as inner:
        driver = conn.connection.driver_connection
        assert driver is not None
        with pipelined(conn):
            outer.execute("SELECT 'outer'")
            with pipelined(conn):
                inner.execute("SELECT 'inner'")
                with pytest.raises(RuntimeError, match="SELECT 'refused in the inner block'"):
                    conn.execute(sa.text("SELECT 'refused in the inner block'"))
            # The inner block's end waited for both answers; the pipeline goes on.
            assert driver.info.pipeline_status == psycopg.pq.PipelineStatus.ON
            with pytest.raises(RuntimeError, match="SELECT 'refused in the outer block'"):
                conn.execute(sa.text("SELECT 'refused in the outer block'"))
            assert (outer.fetchall(), inner.fetchall()) == ([("outer",)], [("inner",)])
        assert driver.info.pipeline_status == psycopg.pq.PipelineStatus.OFF
        assert conn.execute(sa.text("SELECT 'after'")).scalar_one() == "after"


def test_a_failed_statement_inside_raises_its_own_psycopg_error(engine: sa.Engine) -> None:
    # Not PipelineAborted: the classification of failures (store.failures) reads its SQLSTATE.
    def fails_second(conn: sa.Connection) -> None:
        with driver_cursor(conn) as cursor:
            cursor.execute("SELECT 1")
            cursor.execute("SELECT 1 / 0")
            cursor.execute("SELECT 2")

    with pytest.raises(psycopg.errors.DivisionByZero):
        in_a_pipeline(engine, fails_second)


def test_another_threads_read_on_the_connection_waits_for_the_blocks_end(
    engine: sa.Engine,
) -> None:
    # A replay reads the log's next page on a second thread, on the connection whose writes
    # run in pipelined blocks (audit.replay.read_log). Its statement joined the block's
    # pipeline, and its fetch raced the block's end (AttributeError inside psycopg, seen in
    # test_replay.py).
    read: list[tuple[str, list[object]]] = []
    with engine.begin() as conn, driver_cursor(conn) as cursor:

        def beside() -> None:
            rows = driver_rows(conn, "SELECT %(n)s::integer", {"n": 7})
            read.append((threading.current_thread().name, rows))

        reader = threading.Thread(target=beside, name="reader")
        with pipelined(conn):
            cursor.execute("SELECT 'in the block'")
            reader.start()
            time.sleep(0.3)  # time enough for the reader's statement, were it not held
            read.append(("block ends", []))
        reader.join(30)
        assert cursor.fetchall() == [("in the block",)]
    assert read == [("block ends", []), ("reader", [(7,)])]
