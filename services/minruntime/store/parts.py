"""Parts of the state split by podgroup: what one process of a parallel replay owns.

A podgroup's rows and its log entries (podgroup events, nominations, the requeue worker's
decisions about it: each names it as its subject) depend on nothing of another podgroup's,
but for one thing: a committed requeue promises its victim's capacity to other podgroups,
and a promise row ends when its beneficiary leaves pending. So ``replay --jobs N`` gives each
of N processes the podgroups of one part, the promises to them and the committed requeues
that made those: a podgroup is in part ``hashtext(uid) mod N``, computed by PostgreSQL (its
own hash of a text: cheap enough to filter every row of the log and of the tables by; md5
cost twenty times more), the same for every part since they share one server. The tables of
the whole cluster (the queue tree, node-pool configs, nodes) and the log entries about them
belong to the first part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy import Connection

# The column naming a table's podgroup; the tables not listed are the whole cluster's.
BY_PODGROUP: Final = {
    "podgroup_state": "uid",
    "subgroup_state": "uid",
    "pod_state": "uid",
    "nominations": "uid",
    "requeue_decision_log": "uid",
    # A promise is its beneficiary's: it ends when the beneficiary leaves pending, and the
    # committed requeue that made it is replayed in the beneficiary's part too.
    "requeue_promises": "beneficiary",
    "run_log": "uid",
}


@dataclass(frozen=True)
class Part:
    """Part ``index`` of ``of`` (0-based)."""

    index: int
    of: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.of:
            raise ValueError(f"part {self.index} of {self.of} does not exist")

    @property
    def first(self) -> bool:
        """The first part also owns the whole cluster's tables and log entries."""
        return self.index == 0

    def of_column(self, column: str) -> str:
        """SQL: the row's podgroup (named by ``column``) is in this part."""
        # mod(), not %: the statement goes to the driver with %-style parameters.
        return f"mod(hashtext({column}) & 2147483647, {self.of}) = {self.index}"

    def rows_of(self, table: str) -> str | None:
        """SQL condition on ``table``'s rows this part owns; None: it owns none (a table of
        the whole cluster, and this is not the first part)."""
        column = BY_PODGROUP.get(table)
        if column is None:
            return "TRUE" if self.first else None
        return self.of_column(column)


def only(conn: Connection, part: Part, uids: Sequence[str]) -> list[str]:
    """The podgroups of ``uids`` in ``part``, in their order."""
    if not uids:
        return []
    rows = conn.execute(
        sa.text(
            "SELECT uid FROM unnest(CAST(:uids AS text[])) WITH ORDINALITY AS u(uid, n)"
            f" WHERE {part.of_column('uid')} ORDER BY n"
        ),
        {"uids": list(uids)},
    )
    return [str(uid) for uid in rows.scalars()]
