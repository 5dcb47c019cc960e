"""`minruntime violations`: every run an eviction ended while a window still protected it.

The data comes from ``minruntime.audit.violations`` (what ``--json`` prints); this module
parses the options, reads in one read-only transaction (a replica will do) and renders a plain
table: one line per violation, the rules that protected it on continuation lines (for an
attributed eviction: who evicted, then the one rule that applied).
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from decimal import Decimal
from functools import cache
from typing import Annotated, Any, Final, TextIO

import typer
from pydantic_core import to_json

from minruntime.audit.violations import (
    Violation,
    ViolationJson,
    ViolationReport,
    describe_rule,
    violations_in,
    who_evicted,
)
from minruntime.commands.common import Json, option, parse_at, units
from minruntime.commands.render import aligned_with_details, counted, rfc3339
from minruntime.core import ExactJudgement, ExactVerdict, Verdict, format_duration

Since = Annotated[
    str | None,
    option(
        "--since",
        metavar="T",
        help="Only runs that ended at or after T: RFC3339, 'now' or 'now-DURATION' (now-24h).",
    ),
]
QueueName = Annotated[
    str | None,
    option("--queue", metavar="QUEUE", help="Only runs of this queue."),
]
Schema = Annotated[
    str,
    typer.Option(
        "--schema",
        metavar="S",
        help="Read this read surface: a replayed state kept with `replay --into S`.",
    ),
]

_COLUMNS: Final = (
    "ended",
    "uid",
    "queue",
    "ended by",
    "verdict",
    "ran",
    "cut short",
    "protected by",
)


def violations_command(
    since: Since = None,
    queue: QueueName = None,
    schema: Schema = "minruntime",
    as_json: Json = False,
) -> None:
    """Runs an eviction ended inside their protection window: definite or possible, and why;
    violated / honoured / unguarded when the scheduler said who evicted."""
    instant = parse_at(since, option="--since")
    with units() as made:
        report = violations_in(made, since=instant, queue=queue, schema=schema)
    if as_json:
        write_json(report, sys.stdout)
        return
    sys.stdout.write(render(report) + "\n")


def write_json(report: ViolationReport, out: TextIO) -> None:
    """One JSON document: the counts, then ``rows``, one violation per line (a report of tens
    of thousands of violations is written as it is made)."""
    as_json = ViolationJson()
    head = json.dumps(summary(report))
    if not report.violations:
        out.write(head[:-1] + ', "rows": []}\n')
        return
    out.write(head[:-1] + ', "rows": [\n')
    last = len(report.violations) - 1
    for index, violation in enumerate(report.violations):
        # Serialised in Rust (pydantic-core): a report can hold tens of thousands.
        out.write(to_json(as_json.of(violation)).decode())
        out.write(",\n" if index < last else "\n]}\n")


def summary(report: ViolationReport) -> dict[str, Any]:
    """The counts of a report (the head of ``--json``)."""
    return {
        "since": None if report.since is None else rfc3339(report.since),
        "queue": report.queue,
        "evicted_runs": report.evicted_runs,
        "violations": report.violation_count,
        "definite": report.count(Verdict.DEFINITE),
        "possible": report.count(Verdict.POSSIBLE),
        # Runs whose attributed eviction named the rule that applied (docs/audit.md).
        "violated": report.count(ExactVerdict.VIOLATED),
        "honoured": report.count(ExactVerdict.HONOURED),
        "unguarded": report.count(ExactVerdict.UNGUARDED),
        # Requeues the evictor gave up in the range (requeue.abandoned), oldest first.
        "abandoned_requeues": [
            {"at": rfc3339(row.at), "uid": row.uid, "queue": row.queue, "reason": row.reason}
            for row in report.abandoned
        ],
    }


def render(report: ViolationReport) -> str:
    """The report for people: a summary line, then one line per violation."""
    counts = summary(report)
    scope = "".join(
        (
            f" since {rfc3339(report.since)}" if report.since else "",
            f" in queue {report.queue}" if report.queue else "",
        )
    )
    head = (
        f"{counted(counts['violations'], 'protection violation')} among "
        f"{counted(counts['evicted_runs'], 'run')} ended by an eviction{scope}: "
        f"{counts['definite']} definite, {counts['possible']} possible"
    )
    if report.attributed:
        head += (
            f", {counts['violated']} violated"
            f" (also listed: {counts['honoured']} honoured, {counts['unguarded']} unguarded)"
        )
    if not report.violations:
        return "\n".join([head, *_abandoned_lines(report)])
    # The rules below the first on continuation lines, under the "protected by" column.
    table = aligned_with_details(
        [c.upper() for c in _COLUMNS],
        [_cells(violation) for violation in report.violations],
        indent_to=len(_COLUMNS) - 1,
    )
    return "\n".join([head, *table, *_abandoned_lines(report)])


def _abandoned_lines(report: ViolationReport) -> list[str]:
    """The requeues the evictor abandoned in the range: a count, then one line each."""
    if not report.abandoned:
        return []
    lines = [
        f"{counted(len(report.abandoned), 'requeue')} abandoned by the evictor (not carried out"
        " by its deadline; the run went on):"
    ]
    lines += [
        f"  {rfc3339(row.at)}  {row.uid}  {row.queue or '(unknown)'}  {row.reason}"
        for row in report.abandoned
    ]
    return lines


def _cells(violation: Violation) -> tuple[list[str], list[str]]:
    exact = violation.exact
    if exact is None:
        rules = [
            f"{_rule(rule.window)}, cut {_duration(rule.cut_short)} short"
            for rule in violation.protecting
        ]
        core = violation.preemptibility == "semi-preemptible"
    else:
        rules = [_applied(exact)]
        violated = exact.verdict == "violated"
        core = violated and violation.preemptibility == "semi-preemptible"
    if core:
        # SEMANTICS.md §10: its core is protected by no window, against every preemptor.
        rules.insert(0, "semi-preemptible core: never evictable, by any preemptor")
    rules = rules or ["(the stored windows cannot be read by this version)"]
    if violation.attribution is not None:
        rules.insert(0, _evicted_by(violation))
    if violation.last_checkpoint is not None:
        rules.append(_since_checkpoint(violation))
    cells = [
        rfc3339(violation.run_end),
        violation.uid,
        violation.queue or "(unknown)",
        violation.ended_by,
        violation.shown_verdict,
        _duration(violation.ran),
        _duration(violation.cut_short if exact is None else exact.cut_short),
        rules[0],
    ]
    return cells, rules[1:]


def _since_checkpoint(violation: Violation) -> str:
    """The work lost since the run's last checkpoint, beside the whole run's."""
    assert violation.last_checkpoint is not None
    line = f"checkpointed at {rfc3339(violation.last_checkpoint)}"
    since, whole = violation.gpu_seconds_since_checkpoint, violation.gpu_seconds
    if since is not None and whole is not None:
        line += f": lost {_gpu_hours(since)} of the run's {_gpu_hours(whole)} GPU-h"
    return line


def _gpu_hours(gpu_seconds: Decimal) -> str:
    return f"{float(gpu_seconds) / 3600:.2f}"


def _evicted_by(violation: Violation) -> str:
    """Who evicted, as the scheduler said it, and what the verdict rests on."""
    attribution = violation.attribution
    assert attribution is not None
    who = who_evicted(
        attribution.action, attribution.evictor, attribution.evictor_queue, attribution.at
    )
    why = violation.inexact
    if why is not None:
        return f"evicted {who} [{attribution.source}; {_INEXACT[why]}: every rule judged]"
    return f"evicted {who} [{attribution.source}]"


def _applied(exact: ExactJudgement) -> str:
    """The one rule that applied and what became of it."""
    rule = exact.rule
    if rule is None:
        return "not guarded by a minimum runtime (KAI checks it only in preempt and reclaim)"
    if rule.protected:
        return f"{_rule(rule.window)}, cut {_duration(rule.cut_short)} short"
    return f"{_rule(rule.window)}, honoured"


_INEXACT: Final = {
    "no-action": "no action said",
    "unknown-action": "an action KAI does not have",
    "no-evictor-queue": "the evictor's queue is not known",
}
# Cached: the violations of a report share a few rules.
_rule = cache(describe_rule)


def _duration(value: timedelta | None) -> str:
    """For people: to the second (at least 1s when not zero); ``--json`` has it exactly."""
    if value is None:
        return ""
    seconds = round(value.total_seconds())
    return _seconds(seconds if seconds or not value else 1)


@cache
def _seconds(seconds: int) -> str:
    # Cached: the runs of a report share most of their durations, in seconds.
    return format_duration(timedelta(seconds=seconds))
