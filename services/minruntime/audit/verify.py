"""Compare a replayed shadow with the live projections: per-table checksums, differing rows.

Both sides are read in the caller's transaction (a REPEATABLE READ snapshot taken before the
log was read), so the live state compared is exactly the state the replayed log produced.
What a projection's content is, and the checksums: ``minruntime.store.checksums``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

from sqlalchemy import Connection

from minruntime.store.checksums import checksum, differences, unmatched
from minruntime.store.parts import Part
from minruntime.store.read_transactions import (
    begin_repeatable_read,
    export_snapshot,
    import_snapshot,
)
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
    table: str
    live_rows: int
    replay_rows: int
    live_checksum: str
    replay_checksum: str
    differences: list[RowDifference] = field(default_factory=list)
    # How many keys differ in all (the list shows at most SHOWN_ROWS).
    differing_keys: int = 0
    # Content rows of either side that the other side lacks (the set operation's count).
    unmatched_rows: int = 0

    @property
    def equal(self) -> bool:
        return (
            not self.unmatched_rows
            and self.live_checksum == self.replay_checksum
            and self.live_rows == self.replay_rows
        )


def compare(
    conn: Connection,
    shadow: Shadow,
    tables: list[str] | None = None,
    part: Part | None = None,
    live_checksums: Mapping[str, str] | None = None,
) -> list[TableCheck]:
    """Compare every projection table of ``shadow`` with the live one (``live_checksums``:
    the live side's, already computed in the same database snapshot: ``checksums_beside``)."""
    return compare_schemas(conn, LIVE, shadow.tables, tables, part=part, known=live_checksums)


@contextmanager
def checksums_beside(
    conn: Connection, part: Part | None = None
) -> Iterator[Callable[[], dict[str, str]]]:
    """The live side's checksum of every projection table (of ``part``'s rows), computed on a
    second connection in ``conn``'s database snapshot while the caller goes on: ``with``
    gives a function that waits for them.

    They depend on the live state alone, so ``replay --verify`` has PostgreSQL compute them
    while it folds the log (the other core's work, off the command's critical path), and
    the comparison at the end only does the set operations. ``conn``'s transaction must stay
    open until the function has returned (the second connection imports its snapshot).
    """
    exported = export_snapshot(conn)
    engine = conn.engine

    def compute() -> dict[str, str]:
        with engine.connect() as other:
            begin_repeatable_read(other)
            import_snapshot(other, exported)
            try:
                return {
                    table: checksum(other, LIVE, table, part=part)[1]
                    for table in PROJECTIONS
                    if part is None or part.rows_of(table) is not None
                }
            finally:
                other.rollback()

    with ThreadPoolExecutor(1, thread_name_prefix="minruntime-live-checksums") as beside:
        computed = beside.submit(compute)
        yield computed.result


def compare_schemas(
    conn: Connection,
    live: StateTables,
    replay: StateTables,
    tables: Iterable[str] | None = None,
    uids: Sequence[str] | None = None,
    part: Part | None = None,
    known: Mapping[str, str] | None = None,
) -> list[TableCheck]:
    """Compare the projection tables of two state schemas (the first on the "live" side):
    equal or not by one set operation per table in PostgreSQL (``checksums.unmatched``).

    ``uids``: only those podgroups' rows of the podgroup tables (``tables`` must be those).
    ``part``: only the rows of that part of the state (``store.parts``); the tables of the
    whole cluster are compared by the first part alone. ``known``: the first side's
    checksums of these rows, by table, computed already (not computed again).
    """
    checks = []
    for table in tables or list(PROJECTIONS):
        if part is not None and part.rows_of(table) is None:
            continue
        # Equal or not: one set operation over both sides (exact). Equal sides have one
        # checksum, computed once; different ones each their own, and the differing rows.
        live_rows, replay_rows, unmatched_rows = unmatched(conn, live, replay, table, uids, part)
        live_sum = (known or {}).get(table) or checksum(conn, live, table, uids, part)[1]
        replay_sum = live_sum
        found: list[RowDifference] = []
        total = 0
        if unmatched_rows:
            replay_sum = checksum(conn, replay, table, uids, part)[1]
            differing, total = differences(conn, live, replay, table, SHOWN_ROWS, uids, part)
            found = [RowDifference(*difference) for difference in differing]
        checks.append(
            TableCheck(
                table, live_rows, replay_rows, live_sum, replay_sum, found, total, unmatched_rows
            )
        )
    return checks


def merge_parts(per_part: Iterable[Sequence[TableCheck]]) -> list[TableCheck]:
    """The checks of the parts of a parallel replay as one check per table (first-seen order).

    Rows add up; a table's checksum is the md5 of its parts' checksums in part order (equal
    sides, equal checksums; with one part it is that part's); the differences are the first
    ``SHOWN_ROWS`` in key order of all the parts', and their count the sum.
    """
    tables: dict[str, list[TableCheck]] = {}
    for checks in per_part:
        for check in checks:
            tables.setdefault(check.table, []).append(check)
    return [_merged(parts) for parts in tables.values()]


def _merged(parts: list[TableCheck]) -> TableCheck:
    if len(parts) == 1:
        return parts[0]
    differences = sorted(
        (difference for check in parts for difference in check.differences),
        key=lambda difference: difference.key,
    )
    return TableCheck(
        parts[0].table,
        sum(check.live_rows for check in parts),
        sum(check.replay_rows for check in parts),
        md5_of(check.live_checksum for check in parts),
        md5_of(check.replay_checksum for check in parts),
        differences[:SHOWN_ROWS],
        sum(check.differing_keys for check in parts),
        sum(check.unmatched_rows for check in parts),
    )


def md5_of(lines: Iterable[str]) -> str:
    """The md5 of the lines joined by newlines (a list of uids, the checksums of parts)."""
    return hashlib.md5("\n".join(lines).encode()).hexdigest()
