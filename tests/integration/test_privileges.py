"""Least privilege against the real PostgreSQL of the stack (docs/storage.md#roles-and-privileges).

The reader tries every escalation the security review found (the worker's leader lock, NOTIFY
on the worker's channel, temporary tables, CREATE anywhere, the state tables) while a real
requeue worker runs; the runtime role (the processor's and the worker's) tries to make
roles, to become pg_execute_server_program and run a program, and to change the schema.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import DBAPIError

from minruntime.ingest import NOMINATIONS_CHANNEL
from minruntime.requeue import RequeueMetrics, RequeueWorker, WorkerOptions
from minruntime.requeue.worker import LEADER_LOCK_KEY
from minruntime.settings import Settings
from minruntime_dev.stack.postgres import PostgresNode
from tests.e2e.harness import wait_for

LOCK_CALLS = (
    "SELECT pg_advisory_lock(:key)",
    "SELECT pg_try_advisory_lock(:key)",
    "SELECT pg_advisory_lock_shared(:key)",
    "SELECT pg_try_advisory_lock_shared(:key)",
    "SELECT pg_advisory_xact_lock(:key)",
    "SELECT pg_try_advisory_xact_lock(:key)",
    "SELECT pg_advisory_lock((:key >> 32)::int, (:key & 4294967295)::bit(32)::int)",
)
IGNORED = "minruntime_requeue_notifications_ignored_total"


def _refused(engine: sa.Engine, statement: str, **params: object) -> str:
    """Run ``statement``; return PostgreSQL's refusal (the test fails if it was allowed)."""
    with engine.connect() as conn:
        try:
            conn.execute(sa.text(statement), params)
        except DBAPIError as error:
            return str(error.orig)
    raise AssertionError(f"allowed: {statement}")


@pytest.fixture
def running_worker(
    engine: sa.Engine, runtime: sa.Engine
) -> Iterator[tuple[RequeueWorker, CollectorRegistry]]:
    """A real requeue worker, as the runtime role, active after its first cycle."""
    registry = CollectorRegistry()
    options = WorkerOptions(
        topic="kai.requeue-decisions.privileges",
        interval_seconds=3600,
        standby_poll_seconds=0.1,
        settle_seconds=0.0,
    )
    worker = RequeueWorker(runtime, options, RequeueMetrics(registry, ()))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: worker.cycles >= 1, what="the worker's first cycle")
        yield worker, registry
    finally:
        worker.stop.set()
        thread.join(timeout=30)


@pytest.mark.parametrize("call", LOCK_CALLS)
def test_the_reader_cannot_take_the_workers_leader_lock(reader: sa.Engine, call: str) -> None:
    refusal = _refused(reader, call, key=LEADER_LOCK_KEY)
    assert "permission denied for function pg_" in refusal


def test_a_worker_leads_while_the_reader_tries_its_lock(
    reader: sa.Engine, running_worker: tuple[RequeueWorker, CollectorRegistry]
) -> None:
    worker, _ = running_worker
    with reader.connect() as conn:
        with pytest.raises(DBAPIError, match="permission denied"):
            conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": LEADER_LOCK_KEY})
        conn.rollback()
        # The worker holds its key; nobody else (not even the reader's session) does. An
        # advisory lock belongs to one database: pg_locks lists the whole server's, and another
        # test database's worker holds the same key there.
        holders = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND ((classid::bigint << 32) | objid::bigint) = :key AND objsubid = 1"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
            {"key": LEADER_LOCK_KEY},
        ).scalar_one()
    assert worker.leading.is_set()
    assert holders == 1


def test_a_readers_notify_does_not_wake_the_worker_and_is_counted(
    reader: sa.Engine,
    runtime: sa.Engine,
    running_worker: tuple[RequeueWorker, CollectorRegistry],
) -> None:
    worker, registry = running_worker
    cycles = worker.cycles
    with reader.connect() as conn:
        # NOTIFY cannot be revoked: the reader may send it, the worker must not obey it.
        conn.execute(sa.text(f"NOTIFY {NOMINATIONS_CHANNEL}"))
        conn.commit()
    wait_for(lambda: registry.get_sample_value(IGNORED) == 1.0, what="the ignored notification")
    assert worker.cycles == cycles
    # The processor's notification (the runtime role's) still starts a cycle at once.
    with runtime.connect() as conn:
        conn.execute(sa.text(f"NOTIFY {NOMINATIONS_CHANNEL}"))
        conn.commit()
    wait_for(lambda: worker.cycles == cycles + 1, what="the cycle the processor's NOTIFY starts")
    assert registry.get_sample_value(IGNORED) == 1.0


def test_the_reader_cannot_create_temporary_tables(reader: sa.Engine) -> None:
    refusal = _refused(reader, "CREATE TEMP TABLE mine (x int)")
    assert "permission denied to create temporary tables" in refusal


def test_the_reader_cannot_create_in_any_schema(reader: sa.Engine) -> None:
    with reader.connect() as conn:
        schemas = conn.execute(
            sa.text("SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_t%'")
        ).scalars()
        names = sorted(schemas)
    assert {"public", "minruntime", "minruntime_state"} <= set(names)
    for schema in names:
        for statement in (
            f'CREATE TABLE "{schema}".mine (x int)',
            f'CREATE FUNCTION "{schema}".mine() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$',
        ):
            assert "permission denied" in _refused(reader, statement), statement
    assert "permission denied" in _refused(reader, "CREATE SCHEMA mine")


def test_the_reader_cannot_read_the_state_tables(engine: sa.Engine, reader: sa.Engine) -> None:
    with engine.connect() as conn:
        tables = sorted(
            conn.execute(
                sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'minruntime_state'")
            ).scalars()
        )
    assert "podgroup_state" in tables
    for table in tables:
        refusal = _refused(reader, f"SELECT * FROM minruntime_state.{table} LIMIT 1")
        assert "permission denied" in refusal, table


def test_the_runtime_cannot_create_roles(runtime: sa.Engine) -> None:
    with runtime.connect() as conn:
        attributes = conn.execute(
            sa.text(
                "SELECT rolcreaterole, rolcreatedb, rolsuper FROM pg_roles"
                " WHERE rolname = current_user"
            )
        ).one()
    assert tuple(attributes) == (False, False, False)
    assert "permission denied to create role" in _refused(runtime, "CREATE ROLE mine")


def test_the_runtime_cannot_run_programs_on_the_server(runtime: sa.Engine) -> None:
    # The finding's chain: grant itself pg_execute_server_program, then COPY ... TO PROGRAM.
    refusal = _refused(runtime, "GRANT pg_execute_server_program TO CURRENT_USER")
    assert "admin option" in refusal or "permission denied" in refusal
    refusal = _refused(runtime, "COPY (SELECT 1) TO PROGRAM 'id'")
    assert "pg_execute_server_program" in refusal


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE minruntime_state.podgroup_state ADD COLUMN mine int",
        "DROP TABLE minruntime_state.outbox",
        "CREATE TABLE minruntime_state.mine (x int)",
        "DROP VIEW minruntime.queues",
        "CREATE OR REPLACE VIEW minruntime.queues AS SELECT 1 AS name",
        "ALTER FUNCTION minruntime.is_protected(text, text, timestamptz) SECURITY INVOKER",
        "CREATE SCHEMA mine",
        "TRUNCATE minruntime_state.event_log",
        "DELETE FROM minruntime_state.alembic_version",
    ],
)
def test_the_runtime_cannot_change_the_schema(runtime: sa.Engine, statement: str) -> None:
    refusal = _refused(runtime, statement)
    assert "must be owner" in refusal or "permission denied" in refusal


def test_the_runtime_reads_and_writes_rows(engine: sa.Engine, runtime: sa.Engine) -> None:
    with runtime.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO minruntime_state.node_state (name, node_pool, gpu)"
                " VALUES ('n-privileges', 'default', 4)"
            )
        )
        assert conn.execute(sa.text("SELECT count(*) FROM minruntime.nodes")).scalar_one() == 1
        conn.execute(sa.text("DELETE FROM minruntime_state.node_state"))
        assert conn.execute(sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": 1}).scalar()


def test_the_worker_says_one_line_when_public_can_take_its_lock(
    settings: Settings,
    database_url: str,
    runtime: sa.Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from minruntime.bootstrap import warn_if_anyone_can_take_the_leader_lock

    with caplog.at_level(logging.WARNING, logger="minruntime.bootstrap"):
        warn_if_anyone_can_take_the_leader_lock(runtime)
    assert caplog.records == []
    dbname = urlsplit(database_url).path.lstrip("/")
    grant = "GRANT EXECUTE ON FUNCTION pg_try_advisory_lock(bigint) TO PUBLIC"
    with PostgresNode(settings).admin_connection(dbname) as admin:
        admin.execute(grant)
        try:
            with caplog.at_level(logging.WARNING, logger="minruntime.bootstrap"):
                warn_if_anyone_can_take_the_leader_lock(runtime)
        finally:
            admin.execute(grant.replace("GRANT", "REVOKE").replace(" TO ", " FROM "))
    (record,) = caplog.records
    assert "docs/storage.md#advisory-locks" in record.getMessage()
    assert "\n" not in record.getMessage()


SNAPSHOT_ROW = (
    "INSERT INTO minruntime_state.projection_snapshots (log_seq, applied_until, events, podgroups)"
    " VALUES (7, now(), 7, '') RETURNING id"
)


def test_the_runtime_adds_and_reads_snapshots_but_changes_none(
    runtime: sa.Engine, reader: sa.Engine
) -> None:
    with runtime.begin() as conn:
        snapshot_id = conn.execute(sa.text(SNAPSHOT_ROW)).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO minruntime_state.projection_snapshot_tables"
                " (snapshot_id, table_name, rows, columns, data)"
                " VALUES (:id, 'node_state', 0, '{name}', '')"
            ),
            {"id": snapshot_id},
        )
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM minruntime_state.projection_snapshot_tables")
            ).scalar_one()
            == 1
        )
    for statement in (
        "UPDATE minruntime_state.projection_snapshots SET log_seq = 8",
        "DELETE FROM minruntime_state.projection_snapshots",
        "UPDATE minruntime_state.projection_snapshot_tables SET data = ''",
        "DELETE FROM minruntime_state.projection_snapshot_tables",
        "TRUNCATE minruntime_state.projection_snapshot_tables",
    ):
        assert "permission denied" in _refused(runtime, statement)
    for table in ("projection_snapshots", "projection_snapshot_tables"):
        refusal = _refused(reader, f"SELECT * FROM minruntime_state.{table}")
        assert "permission denied" in refusal
