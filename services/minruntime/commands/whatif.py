"""`minruntime whatif`: which running podgroups' protection a queue or config change would change.

Flags describe an edit (fields not given keep their current values); `-f` files are Queue
YAML, a scheduler config or queue/config events, read exactly as `queues apply`, `config
apply` and `produce` read them. The change is tried by ``minruntime.audit.whatif`` on a copy
of the live state that is rolled back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

from minruntime.audit.protection import ProtectionRow, describe_row, resolved_from_label
from minruntime.audit.whatif import (
    KEEP,
    WHATIF_SOURCE,
    Change,
    ChangeEvent,
    ConfigEdit,
    Keep,
    QueueEdit,
    WhatIfReport,
    whatif,
)
from minruntime.commands.common import Json, ReclaimerQueue, current_settings, engine, option
from minruntime.commands.render import aligned, counted, print_json, rfc3339
from minruntime.core import DEFAULT_NODE_POOL, MinRuntimeError, format_duration, parse_duration
from minruntime.errors import UserError
from minruntime.produce import read_changes

UNSET: Final = "unset"
METHODS: Final = ("lca", "queue")
_EFFECTS: Final = {
    "unprotected_now": "unprotected now",
    "protected_now": "protected now",
    "longer": "longer",
    "shorter": "shorter",
    "same_window": "same window",
}


def whatif_command(
    queue: Annotated[
        str | None,
        option("--queue", metavar="NAME", help="The queue to change (or create): its name."),
    ] = None,
    parent: Annotated[
        str | None,
        option(
            "--parent",
            help="--queue's new parent queue; 'unset' makes it a root.",
            metavar="NAME|unset",
        ),
    ] = None,
    preempt: Annotated[
        str | None,
        option(
            "--preempt-min-runtime",
            help="--queue's new preemptMinRuntime (10m, 1h30m, 0s); 'unset' inherits.",
            metavar="DURATION|unset",
        ),
    ] = None,
    reclaim: Annotated[
        str | None,
        option(
            "--reclaim-min-runtime",
            help="--queue's new reclaimMinRuntime; 'unset' inherits.",
            metavar="DURATION|unset",
        ),
    ] = None,
    delete_queues: Annotated[
        list[str] | None,
        option(
            "--delete-queue",
            metavar="NAME",
            help="Delete this queue (its children become roots). Repeatable.",
        ),
    ] = None,
    node_pool: Annotated[
        str | None,
        option(
            "--node-pool",
            metavar="NAME",
            help="The node pool the configuration flags and -f scheduler configs are for "
            "(default: default).",
        ),
    ] = None,
    default_preempt: Annotated[
        str | None,
        option(
            "--default-preempt-min-runtime",
            help="The pool's new defaultPreemptMinRuntime.",
            metavar="DURATION",
        ),
    ] = None,
    default_reclaim: Annotated[
        str | None,
        option(
            "--default-reclaim-min-runtime",
            help="The pool's new defaultReclaimMinRuntime.",
            metavar="DURATION",
        ),
    ] = None,
    method: Annotated[
        str | None,
        option(
            "--reclaim-resolve-method",
            help="The pool's new reclaimResolveMethod: lca|queue.",
            metavar="lca|queue",
        ),
    ] = None,
    files: Annotated[
        list[str] | None,
        option(
            "--filename",
            "-f",
            help="Queue YAML, a scheduler config (or its ConfigMap), or queue/config events "
            "(JSON, JSONL, YAML); a directory; - for stdin. Repeatable; applied before the flags.",
            metavar="FILE",
        ),
    ] = None,
    reclaimer_queue: ReclaimerQueue = None,
    json_output: Json = False,
) -> None:
    """What a queue or configuration change would do to running podgroups' protection.

    Nothing is written: the change is applied to a copy of the live state inside a
    transaction that is rolled back.
    """
    now = datetime.now(UTC)
    pool = node_pool or DEFAULT_NODE_POOL
    queue_edits = _queue_edits(queue, parent, preempt, reclaim)
    config_edits = _config_edits(node_pool, pool, default_preempt, default_reclaim, method)
    deleted = list(delete_queues or [])
    for name in deleted:
        if queue is not None and name == queue:
            raise UserError(f"--delete-queue {name}: also given as --queue; choose one")
    events = read_change_files(files or [], pool, now)
    has_config = any(item.event.type == "config.updated" for item in events)
    if node_pool is not None and not config_edits and not has_config:
        raise UserError(
            f"--node-pool {node_pool}: give --default-preempt-min-runtime, "
            "--default-reclaim-min-runtime, --reclaim-resolve-method or a scheduler config (-f)"
        )
    change = Change(events, queue_edits, deleted, config_edits)
    if change.is_empty:
        raise UserError(
            "nothing to try: give --queue NAME with --parent/--preempt-min-runtime/"
            "--reclaim-min-runtime, --delete-queue NAME, --node-pool configuration flags, "
            "or -f FILE (see `minruntime whatif --help`)"
        )
    report = whatif(engine(), change, at=now, reclaimer_queue=reclaimer_queue)
    if json_output:
        print_json(describe(report))
    else:
        for line in report_lines(report):
            print(line)


# -- flags ---------------------------------------------------------------------------------------


def _queue_edits(
    queue: str | None, parent: str | None, preempt: str | None, reclaim: str | None
) -> list[QueueEdit]:
    if queue is None:
        for flag, value in (
            ("--parent", parent),
            ("--preempt-min-runtime", preempt),
            ("--reclaim-min-runtime", reclaim),
        ):
            if value is not None:
                raise UserError(f"{flag} needs --queue NAME (the queue it changes)")
        return []
    if not queue:
        raise UserError("--queue: the queue name must not be empty")
    return [
        QueueEdit(
            name=queue,
            parent=KEEP if parent is None else (None if parent in (UNSET, "") else parent),
            preempt_min_runtime=_queue_duration("--preempt-min-runtime", preempt),
            reclaim_min_runtime=_queue_duration("--reclaim-min-runtime", reclaim),
            origin=f"--queue {queue}",
        )
    ]


def _queue_duration(flag: str, text: str | None) -> timedelta | Keep | None:
    if text is None:
        return KEEP
    if text.strip() == UNSET:
        return None
    return _duration(flag, text, f" (or '{UNSET}' to inherit)")


def _config_edits(
    node_pool: str | None,
    pool: str,
    default_preempt: str | None,
    default_reclaim: str | None,
    method: str | None,
) -> list[ConfigEdit]:
    if node_pool is not None and not node_pool:
        raise UserError("--node-pool: the node pool name must not be empty")
    if default_preempt is None and default_reclaim is None and method is None:
        return []
    if method is not None and method not in METHODS:
        raise UserError(f"--reclaim-resolve-method {method!r}: must be one of {', '.join(METHODS)}")
    return [
        ConfigEdit(
            node_pool=pool,
            default_preempt_min_runtime=_default_duration(
                "--default-preempt-min-runtime", default_preempt
            ),
            default_reclaim_min_runtime=_default_duration(
                "--default-reclaim-min-runtime", default_reclaim
            ),
            reclaim_resolve_method=method,
            origin=f"--node-pool {pool}",
        )
    ]


def _default_duration(flag: str, text: str | None) -> timedelta | None:
    if text is None:
        return None
    if text.strip() == UNSET:
        raise UserError(f"{flag}: a node-pool default cannot be unset; give a duration (0s: none)")
    return _duration(flag, text)


def _duration(flag: str, text: str, hint: str = "") -> timedelta:
    try:
        return parse_duration(text.strip())
    except MinRuntimeError as error:
        raise UserError(f"{flag} {text!r}: {error}{hint}") from None


# -- files ---------------------------------------------------------------------------------------


def read_change_files(paths: Sequence[str], node_pool: str, now: datetime) -> list[ChangeEvent]:
    """The events of every file, in file and document order (nothing is sent anywhere)."""
    read = read_changes(paths, node_pool, now, current_settings(), source=WHATIF_SOURCE)
    return [ChangeEvent(origin, event) for origin, event in read]


# -- output --------------------------------------------------------------------------------------


def describe(report: WhatIfReport) -> dict[str, Any]:
    """The report as plain data (--json): the change, the summary, the changed podgroups."""
    changes = report.changes
    return {
        "rule": report.rule,
        "reclaimer_queue": report.reclaimer_queue,
        "at": report.at,
        "events": [
            {
                "origin": item.origin,
                "type": item.event.type,
                "subject": item.event.subject,
                "data": item.event.data.model_dump(mode="json", by_alias=True),
            }
            for item in report.events
        ],
        "notes": report.notes,
        "running": len(report.before),
        "changed": len(changes),
        "become_unprotected": report.count("unprotected_now"),
        "become_protected": report.count("protected_now"),
        "changes": [
            {
                "uid": change.before.uid,
                "effect": change.effect,
                "before": describe_row(change.before),
                "after": describe_row(change.after),
            }
            for change in changes
        ],
    }


def report_lines(report: WhatIfReport) -> list[str]:
    """The report as text: the change, the changed podgroups, a summary line."""
    lines = [
        f"The change: {counted(len(report.events), 'event')}, tried on a copy of the live "
        "state (rolled back; nothing is written)"
    ]
    lines += [f"  {line}" for line in _event_lines(report.events)]
    lines += [f"note: {note}" for note in report.notes]
    rule = (
        "preempt protection"
        if report.reclaimer_queue is None
        else f"reclaim protection against a reclaimer in queue {report.reclaimer_queue}"
    )
    changes = report.changes
    running = len(report.before)
    if not changes:
        lines.append(
            f"No running podgroup's {rule} changes ({counted(running, 'running podgroup')})."
        )
        return lines
    lines.append(f"{rule[0].upper()}{rule[1:]} at {rfc3339(report.at)}:")
    header = ["UID", "QUEUE", "BEFORE", "FROM", "UNTIL", "NOW", "AFTER", "FROM", "UNTIL", "NOW"]
    rows = [
        [
            change.before.uid,
            change.before.queue or "-",
            *_protection_cells(change.before),
            *_protection_cells(change.after),
            _EFFECTS[change.effect],
        ]
        for change in changes
    ]
    lines += aligned([[*header, "EFFECT"], *rows])
    unprotected, protected = report.count("unprotected_now"), report.count("protected_now")
    lines.append(
        f"{len(changes)} of {running} running podgroups change; "
        f"{unprotected} {_become(unprotected)} unprotected now, "
        f"{protected} {_become(protected)} protected now."
    )
    return lines


def _event_lines(events: Sequence[ChangeEvent]) -> list[str]:
    lines = []
    for item in events:
        data = item.event.data.model_dump(mode="json", by_alias=True)
        fields = " ".join(
            f"{key}={_field_text(key, value)}"
            for key, value in data.items()
            if key not in ("name", "nodePool")
        )
        said = f"{item.event.type} {item.event.subject} {fields}".rstrip()
        lines.append(f"{said}  [from {item.origin}]")
    return lines


def _field_text(key: str, value: Any) -> str:
    if value is not None:
        return str(value)
    return "none (a root)" if key == "parentQueue" else UNSET


def _protection_cells(row: ProtectionRow) -> list[str]:
    return [
        format_duration(row.min_runtime),
        resolved_from_label(row.resolved_from, row.node_pool),
        rfc3339(row.protected_until),
        "protected" if row.is_protected else "no",
    ]


def _become(count: int) -> str:
    return "becomes" if count == 1 else "become"
