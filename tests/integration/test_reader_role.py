"""minruntime_reader may SELECT the views and EXECUTE the functions, and nothing else."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import ProgrammingError

from tests.cloudevents import allocated, queue, submitted
from tests.integration.helpers import Feed

VIEWS = (
    "queues",
    "podgroups",
    "preempt_protection",
    "requeue_decisions",
    "event_log",
    "dead_letters",
    "node_pool_configs",
    "nodes",
    "nominations",
    "outbox_set_aside",
)
FUNCTIONS = (
    "SELECT count(*) FROM minruntime.reclaim_protection('a')",
    "SELECT count(*) FROM minruntime.reclaim_protection('a', now())",
    "SELECT minruntime.is_protected('u', 'a')",
    "SELECT minruntime.is_protected('u', 'b', now())",
    "SELECT * FROM minruntime.min_runtime_for('a', 'b')",
    "SELECT count(*) FROM minruntime.preempt_protection(now())",
)
FORBIDDEN = (
    "SELECT * FROM minruntime_state.podgroup_state",
    "SELECT * FROM minruntime_state.queue_nodes",
    "SELECT * FROM minruntime_state.alembic_version",
    "INSERT INTO minruntime_state.node_state (name, node_pool, gpu) VALUES ('n', 'p', 1)",
    "UPDATE minruntime.queues SET parent = NULL",
    "DELETE FROM minruntime.podgroups",
    "INSERT INTO minruntime.event_log (topic) VALUES ('x')",
    "TRUNCATE minruntime_state.event_log",
    "CREATE TABLE minruntime.mine (x int)",
    "CREATE VIEW minruntime.mine AS SELECT 1",
    "SELECT * FROM minruntime_state.resolve_for('a', 'b', 'default')",
)


def test_the_reader_sees_the_views_and_calls_the_functions(
    engine: sa.Engine, reader: sa.Engine
) -> None:
    Feed(engine).send(queue("a"), queue("b"), submitted("u", "a"), allocated("u", 1))
    with reader.connect() as conn:
        for view in VIEWS:
            conn.execute(sa.text(f"SELECT * FROM minruntime.{view}")).all()
        for query in FUNCTIONS:
            conn.execute(sa.text(query)).all()
        assert (
            conn.execute(sa.text("SELECT count(*) FROM minruntime.preempt_protection")).scalar()
            == 1
        )
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM minruntime.reclaim_protection('b')")
            ).scalar()
            == 1
        )


@pytest.mark.parametrize("statement", FORBIDDEN)
def test_the_reader_can_do_nothing_else(reader: sa.Engine, statement: str) -> None:
    with reader.connect() as conn, pytest.raises(ProgrammingError, match="permission denied"):
        conn.execute(sa.text(statement))
