"""Sessions of the state's writers frozen inside a statement: found and ended.

A process frozen in the middle of a statement (a stopped container, a paused VM, SIGSTOP)
leaves its backend "active" and waiting for its client: for the rows of a ``COPY ... FROM
STDIN`` that never come (the store writes its rows with COPY), or to send the rows of a result
the client no longer reads (a batch's podgroups). Neither ``idle_in_transaction_session_timeout``
nor ``statement_timeout`` ends it (PostgreSQL notices a cancel only once the client moves:
measured), and its transaction holds the rows it locked — a partition's offsets, podgroups —
until the process resumes or TCP gives up, hours later. A batch that waited longer than its
lock bound ends such sessions: only of the same role (which a role may signal without
privileges), only statements on the state tables, only once their transaction is older than
the bound and they have waited for their client since.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection

_END_FROZEN: Final = (
    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE usename = session_user AND pid <> pg_backend_pid() AND state = 'active'"
    " AND wait_event IN ('ClientRead', 'ClientWrite') AND query LIKE '%%minruntime\\_state.%%'"
    " AND xact_start < clock_timestamp() - make_interval(secs => %(seconds)s)"
    " AND state_change < clock_timestamp() - make_interval(secs => %(seconds)s)"
)


def end_frozen_sessions(conn: Connection, seconds: float) -> list[int]:
    """End this role's sessions frozen inside a statement on the state for over ``seconds``;
    their process ids."""
    rows = conn.exec_driver_sql(_END_FROZEN, {"seconds": seconds}).all()
    return [int(pid) for pid, ended in rows if ended]
