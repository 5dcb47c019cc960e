"""`minruntime protection forecast`: the running podgroups whose windows end in the next hours.

Read from the live state in one REPEATABLE READ transaction made READ ONLY: the running
podgroups (the read surface's protection rows give each one's queue, node pool and run
start), the queue tree and the node pools' configurations; the windows are the core's
(``core.forecast.expiring`` over ``core.RunRules``), per rule and class of preemptors.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from minruntime.audit.violations import whose
from minruntime.core import RunRules, format_rfc3339
from minruntime.core.forecast import Expiry, RunningRun, expiring
from minruntime.errors import UserError
from minruntime.store.unit import Units

# The longest horizon a forecast takes (a window longer than this is protection for good).
MAX_HOURS: Final = 24 * 366


@dataclass(frozen=True)
class Forecast:
    """The windows that end in ``(at, at + hours]``, soonest first."""

    at: datetime
    hours: float
    queue: str | None
    running: int
    expiries: tuple[Expiry, ...]


def forecast(units: Units, *, hours: float, queue: str | None = None) -> Forecast:
    """The live state's forecast for the next ``hours`` (only podgroups of ``queue``)."""
    if not 0 < hours <= MAX_HOURS:
        raise UserError(f"--hours {hours:g}: give a number of hours above 0, at most {MAX_HOURS}")
    if queue is not None and not queue:
        raise UserError("--queue '': name a queue")
    with units.read(only=True) as unit:
        now = unit.now()
        if queue is not None and not unit.queue_exists(queue):
            raise UserError(f"--queue {queue!r}: no queue of that name")
        rows = unit.protection_rows(now)
        tree = unit.queue_tree().tree
        configs = unit.node_pool_configs()
    runs = [
        RunningRun(row.uid, row.queue, row.node_pool, row.start_time)
        for row in rows
        if row.start_time is not None and (queue is None or row.queue == queue)
    ]
    found = expiring(runs, RunRules(tree, configs), now, timedelta(hours=hours))
    return Forecast(now, hours, queue, len(runs), tuple(found))


def describe(forecast: Forecast) -> dict[str, Any]:
    """The forecast as plain data (``--json``)."""
    return {
        "at": format_rfc3339(forecast.at),
        "hours": forecast.hours,
        "queue": forecast.queue,
        "running": forecast.running,
        "expiries": [
            {
                "uid": expiry.uid,
                "queue": expiry.queue,
                "node_pool": expiry.node_pool,
                "run_start": format_rfc3339(expiry.start),
                "rule": expiry.window.rule.value,
                "preemptors": whose(expiry.window),
                "min_runtime": expiry.window.min_runtime.total_seconds(),
                "resolved_from": expiry.window.resolved_from,
                "ends_at": format_rfc3339(expiry.ends_at),
                "in": (expiry.ends_at - forecast.at).total_seconds(),
            }
            for expiry in forecast.expiries
        ],
    }
