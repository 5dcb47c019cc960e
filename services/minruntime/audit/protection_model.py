"""A protection row as plain data and as words: shared by `protection`, `explain` and
`whatif` (``audit.protection`` builds the rows)."""

from __future__ import annotations

from typing import Any

from minruntime.audit.protection import ProtectionRow
from minruntime.core import format_duration


def describe_row(row: ProtectionRow) -> dict[str, Any]:
    """One row of ``protection --json`` (times and durations left for the JSON encoder)."""
    return {
        "uid": row.uid,
        "queue": row.queue,
        "node_pool": row.node_pool,
        "start_time": row.start_time,
        "min_runtime": row.min_runtime,
        "min_runtime_text": format_duration(row.min_runtime),
        "resolved_from": row.resolved_from,
        "protected_until": row.protected_until,
        "is_protected": row.is_protected,
        "evictable_pods": row.evictable_pods,
    }


def resolved_from_label(resolved_from: str | None, node_pool: str) -> str:
    """The queue whose value applied, or whose default it was."""
    if resolved_from is not None:
        return resolved_from
    return f"default (node pool {node_pool})"
