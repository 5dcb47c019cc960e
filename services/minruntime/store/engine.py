"""The database engine, built from the one settings object (never at import time)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, NamedTuple, cast

import psycopg
import sqlalchemy as sa

from minruntime.pgurl import PgAddress
from minruntime.settings import Settings

# Far above the gaps of a healthy batch (milliseconds of Python between two statements, a few
# seconds on a starved machine), far below TCP's detection of a dead peer (2 hours).
IDLE_TRANSACTION_SECONDS = 30.0


def sqlalchemy_url(settings_or_url: Settings | str) -> str:
    """Return a SQLAlchemy URL naming the psycopg 3 driver, from settings or any address
    libpq accepts (one host or several, a URI or `key=value`: minruntime.pgurl)."""
    if isinstance(settings_or_url, Settings):
        return settings_or_url.sqlalchemy_url
    if settings_or_url.startswith("postgresql+"):
        return settings_or_url  # already SQLAlchemy's
    return PgAddress.parse(settings_or_url).sqlalchemy()


def reached_server(conn: sa.Connection) -> str:
    """`host:port/database` of the server this connection reached (of several hosts, the one
    libpq chose), for a log line."""
    info = conn.connection.dbapi_connection.info  # type: ignore[union-attr]
    return f"{info.host}:{info.port}/{info.dbname}"


@contextmanager
def driver_cursor(conn: sa.Connection, *, binary: bool = False) -> Iterator[psycopg.Cursor[Any]]:
    """A psycopg cursor on ``conn``'s connection, in its transaction: no SQLAlchemy rows."""
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor(binary=binary) as cursor:
        yield cursor


@contextmanager
def pipelined(conn: sa.Connection) -> Iterator[None]:
    """Statements run on ``conn``'s driver cursors inside are sent without waiting for each
    answer (psycopg's pipeline mode): PostgreSQL runs one while Python builds the next, and a
    fetch or the block's end waits for all of them (one round trip, not one each). A query's
    rows are read with its cursor's ``fetch*``, inside the block or after it.

    A statement that fails raises where its answer is read (the next statement run, a fetch
    or the block's end), not where it was run: its psycopg error (as any driver cursor's, so
    ``store.failures`` classifies it as before: a lock timeout stays transient, a refused
    value permanent), the later statements of the block not run, the transaction failed
    (rolled back by the caller's ``begin``). ``COPY`` cannot run inside (psycopg refuses it).

    Nested blocks are one pipeline: entering the inner one and leaving it each wait for the
    answers of what was sent before (psycopg syncs there); the pipeline ends with the outer.

    Pipeline mode is the connection's, not the thread's: another thread's ``driver_rows`` on
    the same connection (a replay reads the log's next page beside its writes:
    ``audit.replay.read_log``) waits for the block's end (``_one_thread_at_a_time``), or its
    statement would join this pipeline and its fetch race the block's end.

    Only driver cursors inside. SQLAlchemy would send its statement too, but read its result
    before the answer came (no columns yet), so a query would give no rows, silently: every
    engine ``engine_from`` makes refuses a SQLAlchemy statement (``execute``,
    ``exec_driver_sql``) on a connection in pipeline mode with a RuntimeError naming it, before
    anything is sent (``_refuse_inside_a_pipeline``: one look at the driver's pipeline status
    per SQLAlchemy statement, none per driver cursor's).
    """
    driver = conn.connection.driver_connection
    assert driver is not None
    with _one_thread_at_a_time(conn), driver.pipeline():
        yield


_PIPELINE_LOCK: Final = "minruntime.pipeline_lock"


def _one_thread_at_a_time(conn: sa.Connection) -> threading.RLock:
    """The lock ``pipelined`` holds on ``conn``'s connection (while it lives in the pool), and
    ``driver_rows`` takes: reentrant, so either may run inside a block of the same thread."""
    info = conn.info
    lock = info.get(_PIPELINE_LOCK)
    if lock is None:
        lock = info.setdefault(_PIPELINE_LOCK, threading.RLock())
    return cast(threading.RLock, lock)


def _refuse_inside_a_pipeline(
    conn: sa.Connection,
    cursor: psycopg.Cursor[Any],
    statement: str,
    parameters: object,
    context: object,
    executemany: bool,
) -> None:
    """SQLAlchemy's ``before_cursor_execute``: a programming error inside ``pipelined``."""
    if cursor.connection.pgconn.pipeline_status:
        raise RuntimeError(
            "a SQLAlchemy statement inside store.engine.pipelined would return no rows;"
            f" run it on a driver cursor (store.engine.driver_cursor) or outside the block:"
            f" {' '.join(statement.split())[:200]!r}"
        )


def driver_rows(
    conn: sa.Connection, statement: str, params: Mapping[str, Any], *, binary: bool = False
) -> list[Any]:
    """``statement``'s rows straight from the driver (no SQLAlchemy rows); its errors raised
    as SQLAlchemy's, as every other statement's (the commands' one-line errors read them).
    From another thread than a ``pipelined`` block's on the connection: after that block."""
    try:
        with _one_thread_at_a_time(conn), driver_cursor(conn, binary=binary) as cursor:
            return cursor.execute(statement, params).fetchall()
    except psycopg.Error as error:
        raise sa.exc.DBAPIError.instance(statement, params, error, psycopg.Error) from error


class Replication(NamedTuple):
    """What the server a connection reached says of its replication."""

    standby: bool
    synchronous_commit: str
    synchronous_standby_names: str
    replicas: int


def replication_of(conn: sa.Connection) -> Replication:
    """Whether the server is a standby, its synchronous settings and how many replicas it
    streams to."""
    standby: Any = conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one()
    commit: Any = conn.execute(sa.text("SHOW synchronous_commit")).scalar_one()
    names: Any = conn.execute(sa.text("SHOW synchronous_standby_names")).scalar_one()
    replicas: Any = conn.execute(sa.text("SELECT count(*) FROM pg_stat_replication")).scalar_one()
    return Replication(standby, commit, names, replicas)


def engine_from(settings_or_url: Settings | str, **options: object) -> sa.Engine:
    """Create an engine for the service's database; connects lazily, on first use.

    Its SQLAlchemy statements are refused inside ``pipelined`` (they would return no rows).
    """
    options.setdefault("pool_pre_ping", True)
    engine = sa.create_engine(sqlalchemy_url(settings_or_url), **options)
    sa.event.listen(engine, "before_cursor_execute", _refuse_inside_a_pipeline)
    return engine


def bounded_idle_transactions(
    engine: sa.Engine, seconds: float = IDLE_TRANSACTION_SECONDS
) -> sa.Engine:
    """``engine`` (its pool shared) whose transactions PostgreSQL ends after ``seconds`` idle,
    and whose statements wait at most ``seconds`` for a lock.

    Idle: a process frozen between two statements. A process frozen in the middle of a
    ``COPY ... FROM STDIN`` (the store writes its rows with COPY) is "active", not idle, and
    PostgreSQL ends it neither way: a batch that waited ``seconds`` for a lock gives up
    (LockNotAvailable, retried like any transient error) and ``stream.sink.BatchSink`` first
    ends such frozen writers (``store.frozen``). A healthy batch waits milliseconds for
    another's locks.

    ``SET LOCAL`` at each transaction's start: other users of the pool (the outbox relay, whose
    transaction legitimately waits for Kafka) keep the server's default.
    """
    bounded = engine.execution_options()
    milliseconds = max(1, round(seconds * 1000))
    settings = (
        f"SET LOCAL idle_in_transaction_session_timeout = {milliseconds}",
        f"SET LOCAL lock_timeout = {milliseconds}",
    )

    @sa.event.listens_for(bounded, "begin")
    def _bound(conn: sa.Connection) -> None:
        # psycopg's BEGIN and both settings in one round trip (pipeline mode: a statement
        # each, as the extended protocol wants), not two.
        try:
            with pipelined(conn), driver_cursor(conn) as cursor:
                for setting in settings:
                    cursor.execute(setting)
        except psycopg.Error as error:  # as SQLAlchemy's, as the statement it was before
            statement = "; ".join(settings)
            raise sa.exc.DBAPIError.instance(statement, None, error, psycopg.Error) from error

    return bounded
