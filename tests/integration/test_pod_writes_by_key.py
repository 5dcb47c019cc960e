"""A batch's pod update and delete read ``pod_state`` through its primary key, on the real
database: their cost follows the batch, not the table.

Matched only against the batch's unpacked rows (``t.uid = u.uid AND t.name = u.name``), the
statements were planned as a hash join over a scan of the whole table (the JSON array's rows
are estimated at 100), so every batch that allocated or released pods read every stored pod:
2.7 ms for 30 pods at 7,478 stored, growing with the cluster. ``store.bulk`` adds the first
key's probe (``t.uid = ANY(ARRAY(...))``).
"""

from __future__ import annotations

import re

import sqlalchemy as sa

from minruntime.store.bulk import delete_statement, update_statement
from minruntime.store.podgroups import _POD_COLUMNS as POD_COLUMNS
from minruntime.store.podgroups import _POD_KEY as POD_KEY
from minruntime.store.schema import LIVE
from tests.cloudevents import submitted
from tests.integration.helpers import Feed

PODGROUPS = 3000
PODS = 2


def _plan(engine: sa.Engine, statement: str, params: dict[str, str]) -> str:
    with engine.begin() as conn:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute("EXPLAIN " + statement, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        conn.rollback()
    return plan


def _plans(engine: sa.Engine, uids: list[str]) -> list[str]:
    """The plans of the pod update and delete a batch that allocates the pods of ``uids``
    writes."""
    rows = [
        {
            "uid": uid,
            "name": f"{uid}-{n}",
            "subgroup": None,
            "gpu": 1,
            "node": "n1",
            "allocated": True,
        }
        for uid in uids
        for n in range(PODS)
    ]
    key = {column: POD_COLUMNS[column] for column in POD_KEY}
    return [
        _plan(engine, statement, params)
        for statement, params in (
            update_statement(LIVE.pod_state, POD_KEY, POD_COLUMNS, rows),
            delete_statement(LIVE.pod_state, key, [{k: row[k] for k in key} for row in rows]),
        )
    ]


def test_pod_update_and_delete_probe_the_primary_key(engine: sa.Engine, feed: Feed) -> None:
    uids = [f"probe-{i:04d}" for i in range(PODGROUPS)]
    feed.send(*(submitted(uid, "q", pods=PODS) for uid in uids))
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT count(*) FROM minruntime_state.pod_state")).scalar()
    assert stored == PODGROUPS * PODS
    # The pods of 15 podgroups, as a batch that allocates them writes them.
    for plan in _plans(engine, uids[::200]):
        assert "Seq Scan on pod_state" not in plan, plan
        assert "pk_pod_state" in plan, plan


def test_pod_update_and_delete_plan_with_the_number_of_rows_they_write(
    engine: sa.Engine, feed: Feed
) -> None:
    """The planner is told how many rows a batch writes (a function's rows are estimated at
    100): with 100 for 2,500, the update's join to the probed pods could be planned as a nested
    loop re-reading every probed pod for each written one (0.8 s a batch at 240,000 pods)."""
    uids = [f"counted-{i:04d}" for i in range(1250)]
    feed.send(*(submitted(uid, "q", pods=PODS) for uid in uids))
    for plan in _plans(engine, uids):
        estimated = re.search(r"Function Scan on u .*?rows=(\d+)", plan)
        assert estimated is not None, plan
        assert int(estimated.group(1)) == len(uids) * PODS, plan
        assert "Join Filter" not in plan, plan
