"""`minruntime requeue plan`: what the requeue worker's next cycle would decide, writing nothing.

The data comes from ``minruntime.requeue.preview`` (the worker's own reading and planning);
this module parses the options, opens the state — the live one, or the one the service had at
``--at`` (``audit.asof.state_at``, as `explain --at` does) — in a transaction that is READ ONLY
while the worker's code runs and always rolled back, and renders a plain table or ``--json``.
Decisions are printed field by field from the decision value, so a field or reason the planner
gains shows up without a change here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Annotated, Any, Final

import typer

from minruntime.audit.asof import Units, state_at
from minruntime.commands.common import At, Json, first_line, insufficient_privilege, parse_at, units
from minruntime.commands.render import aligned_with_details, print_json, rfc3339
from minruntime.core import RequeueDecision, format_duration
from minruntime.core.proportion import QuotaVerdict
from minruntime.errors import UserError
from minruntime.events.types import MAX_LABEL
from minruntime.requeue import RequeuePreview, preview

NodePool = Annotated[
    str | None,
    typer.Option(
        "--node-pool",
        metavar="POOL",
        help="Only the decisions about podgroups of this node pool. Default: every pool.",
        show_default=False,
    ),
]

# The table names at most this many uids per nominator skip reason (``--json`` has them all).
_UIDS_PER_REASON: Final = 5
# The decision fields the table has a column or a line for; any other field is shown as
# "name: value" under its decision when it is not empty.
_COLUMNS: Final = (
    "uid",
    "outcome",
    "reason",
    "nominated by",
    "overrun",
    "work at risk",
    "beneficiaries",
    "cooldown until",
    "recorded",
)
_SHOWN: Final = frozenset(
    {
        "uid",
        "outcome",
        "reason",
        "nominated_by",
        "beneficiaries",
        "requeue_not_before",
        "decided_at",
        "placements",
        "reservations",
        "quota",
        "work_at_risk",
    }
)


def plan_command(node_pool: NodePool = None, at: At = None, json_output: Json = False) -> None:
    """What the requeue worker would nominate, commit or roll back now (or at --at), and why.

    Runs the worker's own nominator and planner on the state; writes nothing, takes no lock.
    """
    now = datetime.now(UTC)
    instant = parse_at(at, now)
    if instant is not None and instant > now:
        raise UserError(
            f"--at {at!r} is in the future: the plan is made on a state the service had; "
            "omit --at for the state now"
        )
    pool = _node_pool(node_pool)
    with units() as made:
        result = dry_run(made, at=instant, now=now, node_pool=pool)
    if json_output:
        print_json(describe(result, at=instant))
        return
    print(render(result, at=instant))


def _node_pool(text: str | None) -> str | None:
    if text is None:
        return None
    if not text.strip():
        raise UserError("--node-pool: the node pool name must not be empty")
    if len(text) > MAX_LABEL:
        raise UserError(
            f"--node-pool: a node pool name has at most {MAX_LABEL} characters "
            f"(a Kubernetes label value), got {len(text)}"
        )
    return text


def dry_run(
    made: Units, *, at: datetime | None, now: datetime, node_pool: str | None = None
) -> RequeuePreview:
    """The worker's plan on the live state at ``now``, or on the state at ``at`` (planned at
    ``at``). Nothing is written to the live state and no lock is taken."""
    try:
        with state_at(made, at) as unit:
            # Live: before the first query, so the whole transaction is read-only. At T: after
            # the rolled-back shadow is filled, so the worker's code runs read-only either way.
            unit.read_only()
            return preview(unit, now=at or now, node_pool=node_pool)
    except Exception as error:
        # The worker's reads go straight to psycopg's cursor: its errors arrive unwrapped.
        if not insufficient_privilege(error):
            raise
        raise UserError(
            f"{first_line(error)}: `requeue plan` reads the tables the requeue worker reads "
            "(schema minruntime_state), and with --at builds a temporary shadow schema: run it "
            "as the owner role, or without --at as the runtime role (docs/requeue-worker.md)"
        ) from None


# -- JSON ---------------------------------------------------------------------------------------


def describe(result: RequeuePreview, *, at: datetime | None) -> dict[str, Any]:
    """The plan for machines (times RFC3339 and durations seconds, by ``print_json``)."""
    return {
        "now": result.now,
        "state": "live" if at is None else "as_of",
        "node_pool": result.node_pool,
        "writes": "nothing",
        "nominated": [
            {"uid": uid, "overrun": overrun} for uid, overrun in sorted(result.overruns.items())
        ],
        "not_nominated": [
            {"uid": uid, "reason": reason.value} for uid, reason in sorted(result.skipped.items())
        ],
        "candidates": [
            {"uid": uid, "nominated_by": sorted(names)}
            for uid, names in sorted(result.candidates.items())
        ],
        "decisions": [
            {**plain_fields(decision), "recorded": result.recorded(decision)}
            for decision in result.decisions
        ],
        "promised": dict(result.promised),
        "excluded": [plain_fields(exclusion) for exclusion in result.excluded],
    }


def plain_fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields, every one, as JSON-ready values (enums by value)."""
    return {field.name: _plain(getattr(value, field.name)) for field in fields(value)}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return plain_fields(value)
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, frozenset | set):
        return sorted(_plain(item) for item in value)
    return value


# -- text ---------------------------------------------------------------------------------------


def render(result: RequeuePreview, *, at: datetime | None) -> str:
    """The plan for people: what was read, the nominations, then one row per decision."""
    state = "the live state" if at is None else "the state the service had"
    pool = f"node pool {result.node_pool}" if result.node_pool else "every node pool"
    lines = [
        f"Requeue plan at {rfc3339(result.now)}, on {state}, {pool} (dry run: nothing written, "
        "no lock taken)"
    ]
    skipped: dict[str, list[str]] = {}
    for uid, reason in sorted(result.skipped.items()):
        skipped.setdefault(reason.value, []).append(uid)
    for why, uids in sorted(skipped.items()):
        shown = ", ".join(uids[:_UIDS_PER_REASON])
        if len(uids) > _UIDS_PER_REASON:
            shown += f" and {len(uids) - _UIDS_PER_REASON} more"
        lines.append(f"not nominated by expectedruntime ({why}): {len(uids)}: {shown}")
    if not result.decisions:
        lines.append("no candidates: the worker would decide nothing")
    else:
        lines.extend(_table(result))
        recorded = sum(1 for decision in result.decisions if result.recorded(decision))
        lines.append(
            f"the worker would record {recorded} of {len(result.decisions)} decision(s); "
            "a repeat of the newest recorded decision for the same run is not recorded again"
        )
    if result.promised:
        lines.append(
            "promised after the cycle: "
            + ", ".join(f"{node} {_gpu(gpu)} GPU" for node, gpu in result.promised.items())
        )
    lines.extend(
        f"left out: {e.what} {e.name} ({e.reason.value})" + (f": {e.detail}" if e.detail else "")
        for e in result.excluded
    )
    return "\n".join(lines)


def _table(result: RequeuePreview) -> list[str]:
    rows = [(_cells(result, decision), _details(decision)) for decision in result.decisions]
    return aligned_with_details([column.upper() for column in _COLUMNS], rows, indent_to=1)


def _cells(result: RequeuePreview, decision: RequeueDecision) -> list[str]:
    return [
        decision.uid,
        decision.outcome.value,
        "-" if decision.reason is None else decision.reason.value,
        ",".join(decision.nominated_by),
        _overrun(result.overruns.get(decision.uid)),
        _at_risk(decision.work_at_risk),
        ",".join(decision.beneficiaries) or "-",
        rfc3339(decision.requeue_not_before),
        "yes" if result.recorded(decision) else "no (repeat)",
    ]


def _details(decision: RequeueDecision) -> list[str]:
    details = [
        f"{placement.podgroup}/{placement.pod} -> {placement.node} ({_gpu(placement.gpu)} GPU)"
        for placement in decision.placements
    ]
    if decision.quota is not None:
        details.extend(share_lines(decision.quota))
    for field in fields(decision):
        value = getattr(decision, field.name)
        if field.name in _SHOWN or value is None or value in ((), {}, frozenset()):
            continue
        details.append(f"{field.name}: {_text(value)}")
    return details


def share_lines(verdict: QuotaVerdict) -> list[str]:
    """The shares that refused a beneficiary, one line per queue (docs/rule-engine.md)."""
    lines = [f"KAI would {_RULE_TEXT[verdict.rule.value]} (at queue {verdict.queue})"]
    for side, share in (("beneficiary", verdict.beneficiary), ("victim", verdict.victim)):
        lines.append(
            f"{side} queue {share.queue}: deserved {_amount(share.deserved)}, fair share "
            f"{_gpu(share.fair_share)}, limit {_amount(share.limit)}, allocated "
            f"{_gpu(share.allocated_before)} -> {_gpu(share.allocated_after)} GPU"
        )
    return lines


_RULE_TEXT: Final = {
    "limit": "refuse the beneficiary: its queue would exceed its GPU limit",
    "fair_share": "reclaim the beneficiary back: over its fair share, victim's queue not",
    "deserved_quota": "reclaim the beneficiary back: over its quota, victim's queue within",
}


def _amount(value: float) -> str:
    return "unlimited" if value < 0 else _gpu(value)


def _overrun(overrun: timedelta | None) -> str:
    # For people, to the second; ``--json`` has it exactly.
    return "-" if overrun is None else _duration(timedelta(seconds=round(overrun.total_seconds())))


def _at_risk(gpu_seconds: float | None) -> str:
    # GPU-hours for people (since the last checkpoint, else the run's start: the decision's
    # last_checkpoint line says which); ``--json`` has the GPU-seconds.
    return "-" if gpu_seconds is None else f"{gpu_seconds / 3600:.2f} GPU-h"


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, timedelta):
        return _duration(value)
    plain = _plain(value)
    return plain if isinstance(plain, str) else str(plain)


def _duration(value: timedelta) -> str:
    return format_duration(max(value, timedelta(0)))


def _gpu(value: float) -> str:
    return f"{value:g}"
