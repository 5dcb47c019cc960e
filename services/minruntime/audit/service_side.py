"""The service's side of `kube diff` and of the bridge's drift check: the rows of
``minruntime.podgroups`` as ``MINRUNTIME_DATABASE_URL``'s role reads them (the reader role
works too), and the pods each holds.

``cluster/`` never reads the database: its callers pass it ``read_podgroups`` with ``row``, the
function that makes its own record of one row (``cluster.drift.service_podgroup``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.read_surface import held_pods, service_podgroups
from minruntime.store.read_transactions import repeatable_read

T = TypeVar("T")
# One row of the view and the names of the pods it holds (None: not readable by this role).
RowMaker = Callable[[Mapping[Any, Any], "Sequence[str] | None"], T]


def read_podgroups(
    settings: Settings,
    namespace: str | None,
    uids: Sequence[str],
    *,
    with_pods: bool,
    row: RowMaker[T],
) -> list[T]:
    """The rows of ``minruntime.podgroups`` (of ``namespace`` and ``uids``, or all), each made
    by ``row``; with ``with_pods``, with the names of the pods each holds, when the role may
    read them."""
    engine = engine_from(settings, pool_pre_ping=False, connect_args={"connect_timeout": 10})
    try:
        with repeatable_read(engine) as conn:
            rows = service_podgroups(conn, namespace, uids)
            only = [found["uid"] for found in rows] if namespace is not None else None
            held = held_pods(conn, only) if with_pods else None
    finally:
        engine.dispose()
    return [row(found, None if held is None else held.get(found["uid"], ())) for found in rows]
