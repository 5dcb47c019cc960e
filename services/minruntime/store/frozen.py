"""Writers of the state frozen inside a COPY: found and ended.

The store writes its rows with ``COPY ... FROM STDIN``. A process frozen in the middle of one
(a stopped container, a paused VM, SIGSTOP) leaves its backend waiting for rows that never
come: "active", waiting for the client, so neither ``idle_in_transaction_session_timeout``
nor ``statement_timeout`` ends it (PostgreSQL only notices the cancel when the next row
arrives), and its transaction holds the rows it locked — a partition's offsets, podgroups —
until the process resumes or TCP gives up, hours later. A batch that waits longer than its
lock bound for such rows ends those backends: only backends of the same role (the one a
role may signal without privileges), only inside a COPY into the state tables, only once
they have waited for their client longer than the bound.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection

_END_FROZEN_COPIES: Final = (
    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE usename = session_user AND pid <> pg_backend_pid() AND state = 'active'"
    " AND wait_event = 'ClientRead' AND query LIKE 'COPY minruntime\\_state.%%'"
    " AND state_change < clock_timestamp() - make_interval(secs => %(seconds)s)"
)


def end_frozen_copies(conn: Connection, seconds: float) -> list[int]:
    """End this role's backends stuck in a COPY into the state for over ``seconds``; their
    process ids."""
    rows = conn.exec_driver_sql(_END_FROZEN_COPIES, {"seconds": seconds}).all()
    return [int(pid) for pid, ended in rows if ended]
