"""Compare a replayed shadow with the live projections: per-table checksums, differing rows.

Both sides are read in the caller's transaction (a REPEATABLE READ snapshot taken before the
log was read), so the live state compared is exactly the state the replayed log produced.
What a projection's content is, and the checksums: ``minruntime.store.checksums``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from sqlalchemy import Connection

from minruntime.store.checksums import checksum, differences
from minruntime.store.schema import LIVE, StateTables
from minruntime.store.shadows import PROJECTIONS, Shadow

SHOWN_ROWS: Final = 10


@dataclass(frozen=True)
class RowDifference:
    """One key whose row differs: its text on each side (None: absent there)."""

    key: str
    live: str | None
    replay: str | None


@dataclass(frozen=True)
class TableCheck:
    """One projection table compared."""

    table: str
    live_rows: int
    replay_rows: int
    live_checksum: str
    replay_checksum: str
    differences: list[RowDifference] = field(default_factory=list)
    # How many keys differ in all (the list shows at most SHOWN_ROWS).
    differing_keys: int = 0

    @property
    def equal(self) -> bool:
        return self.live_checksum == self.replay_checksum and self.live_rows == self.replay_rows


def compare(conn: Connection, shadow: Shadow, tables: list[str] | None = None) -> list[TableCheck]:
    """Compare every projection table of ``shadow`` with the live one."""
    return compare_schemas(conn, LIVE, shadow.tables, tables)


def compare_schemas(
    conn: Connection,
    live: StateTables,
    replay: StateTables,
    tables: Iterable[str] | None = None,
    uids: Sequence[str] | None = None,
) -> list[TableCheck]:
    """Compare the projection tables of two state schemas (the first on the "live" side).

    ``uids``: only those podgroups' rows of the podgroup tables (``tables`` must be those).
    """
    checks = []
    for table in tables or list(PROJECTIONS):
        live_rows, live_sum = checksum(conn, live, table, uids)
        replay_rows, replay_sum = checksum(conn, replay, table, uids)
        if (live_rows, live_sum) == (replay_rows, replay_sum):
            checks.append(TableCheck(table, live_rows, replay_rows, live_sum, replay_sum))
            continue
        found, total = differences(conn, live, replay, table, SHOWN_ROWS, uids)
        checks.append(
            TableCheck(
                table,
                live_rows,
                replay_rows,
                live_sum,
                replay_sum,
                [RowDifference(*difference) for difference in found],
                total,
            )
        )
    return checks
