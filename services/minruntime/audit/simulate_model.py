"""A simulation report as plain data: what ``simulate --json`` prints and the HTML page shows.

Times are RFC3339, work in GPU-hours (three decimals), waits in hours. Each group of figures
names its confidence (``core.simulation.CONFIDENCE``): the page and the table read them here,
so the three outputs cannot disagree.
"""

from __future__ import annotations

from typing import Any

from minruntime.audit.simulate import SimulationReport
from minruntime.core import format_rfc3339
from minruntime.core.simulation import CONFIDENCE, Flip, QueueFigures

_HOUR = 3600.0


def hours(seconds: float) -> float:
    """Seconds as hours, to three decimals."""
    return round(seconds / _HOUR, 3)


def describe(report: SimulationReport) -> dict[str, Any]:
    result = report.result
    span = report.span
    return {
        "since": format_rfc3339(result.since),
        "until": format_rfc3339(result.until),
        "queue": report.queue,
        "change": [
            {"origin": item.origin, "type": item.event.type, "subject": item.event.subject}
            for item in report.change
        ],
        "log": {
            "entries": span.entries,
            "first": None if span.first is None else format_rfc3339(span.first),
            "last": None if span.last is None else format_rfc3339(span.last),
            "read": report.entries,
            "in_window": report.in_window,
            "skipped": report.skipped,
            "skipped_entries": report.skipped_lines,
            "dead_letters": report.dead_letters,
            "missing": None
            if report.missing is None
            else {
                "from": format_rfc3339(report.missing[0]),
                "to": format_rfc3339(report.missing[1]),
            },
        },
        "rules_differ": result.rules_differ,
        "notes": report.notes,
        "confidence": {
            group: {"kind": kind.value, "why": why} for group, (kind, why) in CONFIDENCE.items()
        },
        "total": figures(result.total),
        "queues": {name: figures(result.queues[name]) for name in sorted(result.queues)},
        "flips": [flip_json(flip) for flip in result.flips],
        "seconds": round(report.seconds, 3),
    }


def figures(of: QueueFigures) -> dict[str, Any]:
    """One queue's (or the total's) figures, by group."""
    return {
        "violations": {
            "evicted_runs": of.evicted_runs,
            "before": {
                "definite": of.violations_before_definite,
                "possible": of.violations_before_possible,
            },
            "after": {
                "definite": of.violations_after_definite,
                "possible": of.violations_after_possible,
            },
            "new": {"definite": of.new_definite, "possible": of.new_possible},
            "avoided": {"definite": of.avoided_definite, "possible": of.avoided_possible},
        },
        "gpu_hours_lost": {
            "before": hours(of.gpu_seconds_lost_before),
            "after": hours(of.gpu_seconds_lost_after),
        },
        "flips_from_committed": {
            "decisions": of.decisions,
            "to_rolled_back": of.flips_to_rolled_back,
            "to_skipped": of.flips_to_skipped,
        },
        "flips_to_committed": {"to_committed": of.flips_to_committed},
        "requeue_gpu_hours": {
            "saved": hours(of.requeue_gpu_seconds_saved),
            "added": hours(of.requeue_gpu_seconds_added),
        },
        "wait": {"added_hours": hours(of.wait_added_seconds)},
        "protection": {
            "runs": of.runs,
            "longer": of.runs_protected_longer,
            "shorter": of.runs_protected_shorter,
            "gpu_hours_before": hours(of.protected_gpu_seconds_before),
            "gpu_hours_after": hours(of.protected_gpu_seconds_after),
            "full_gpu_hours_before": hours(of.fully_protected_gpu_seconds_before),
            "full_gpu_hours_after": hours(of.fully_protected_gpu_seconds_after),
        },
    }


def flip_json(flip: Flip) -> dict[str, Any]:
    return {
        "at": format_rfc3339(flip.at),
        "uid": flip.uid,
        "queue": flip.queue,
        "before": flip.before,
        "before_reason": flip.before_reason,
        "after": flip.after,
        "after_reason": flip.after_reason,
        "confidence": flip.confidence.value,
        "gpu_hours": None if flip.gpu_seconds is None else hours(flip.gpu_seconds),
        "beneficiaries": list(flip.beneficiaries),
    }
