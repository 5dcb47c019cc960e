"""The runs a run of events ended: ``run_log`` rows, judged with the windows in force then.

The podgroup fold says which event ended a run (``core.ended_run``); the rules in force at
that event — the queue tree and the node pools' configurations as the projection has them
right then, which in a replay is the log's order and live is made the same by the tree lock
(``store.queues.lock_tree``) — say how protected it still was (``core.RunRules``), and, for a
run whose eviction the scheduler attributed, the one rule that applied and its verdict
(``core.exact_judgement``). Each run becomes one row; the ones an eviction ended are also
handed to the processor's metrics (``LostRun``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection

from minruntime.core import (
    EndedRun,
    ExactJudgement,
    ProtectionRule,
    Reclaimers,
    RuleSet,
    RuleWindow,
    RunRules,
    Verdict,
    exact_judgement,
    run_verdict,
)
from minruntime.store.runs import append_runs
from minruntime.store.schema import StateTables

_RUN_WINDOWS: Final = "minruntime.run_windows"


class LostRun(NamedTuple):
    """A run an eviction ended: what the processor's metrics count."""

    queue: str | None
    # The queue was in the tree when the run ended (bounded metric labels).
    queue_known: bool
    ended_by: str
    seconds: float
    gpu_seconds: float | None
    # definite | possible | none
    protection: str
    # The scheduler's action, as it came (None: not attributed or not said).
    action: str | None = None
    # violated | honoured | unguarded (None: no exact verdict; ``protection`` stands).
    exact_verdict: str | None = None
    # The top owner's kind (JobSet, RayJob, ...; None: no top-owner metadata).
    owner_kind: str | None = None
    # Seconds and GPU-seconds since the run's last checkpoint (None: none known; ``seconds``
    # and ``gpu_seconds`` stand).
    seconds_since_checkpoint: float | None = None
    gpu_seconds_since_checkpoint: float | None = None

    @property
    def seconds_lost(self) -> float:
        """The run time lost the metrics count: since the last checkpoint when one is known."""
        since = self.seconds_since_checkpoint
        return self.seconds if since is None else since

    @property
    def gpu_seconds_lost(self) -> float | None:
        """The work lost the metrics count: since the last checkpoint when one is known."""
        since = self.gpu_seconds_since_checkpoint
        return self.gpu_seconds if since is None else since


class RunLog:
    """The runs ended in one run of events: rows to append, and the evicted ones for metrics."""

    def __init__(self, conn: Connection, tables: StateTables) -> None:
        self._conn = conn
        self._tables = tables
        self._rows: list[dict[str, Any]] = []
        self.lost: list[LostRun] = []

    def _stored_windows(self, rules: RunRules) -> dict[RuleSet, str]:
        """Each rule set of ``rules`` -> its windows as stored (JSON text), made once per rule
        set, not once per run: kept on the connection beside ``rules``, which the projections
        keep there while the tree and the configurations stay the same, so a batch reuses what
        the batches before it made (one JSON text per queue, where each batch made its own:
        issue 30). Rule sets are compared by identity; a new ``rules`` starts afresh, so what
        is kept is bounded by the rule sets ``rules`` itself keeps."""
        key = (_RUN_WINDOWS, self._tables.schema)
        kept = self._conn.info.get(key)
        if kept is None or kept[0] is not rules:
            kept = self._conn.info[key] = (rules, {})
        stored: dict[RuleSet, str] = kept[1]
        return stored

    def record(self, run: EndedRun, source: str, event_id: str, rules: RunRules) -> None:
        """Judge ``run`` (ended by the event ``(source, event_id)``) under ``rules``."""
        rule_set = rules.rules(run.queue, run.node_pool)
        verdict, cut_short = run_verdict(rule_set, run)
        windows = self._stored_windows(rules)
        stored = windows.get(rule_set)
        if stored is None:
            stored = windows[rule_set] = json.dumps(
                [window_json(window) for window in rule_set.windows], separators=(",", ":")
            )
        gpu_seconds = run.gpu_seconds
        exact = exact_judgement(rules, run)
        row = run_row(run, gpu_seconds, rule_set, stored, verdict, cut_short, source, event_id)
        row.update(attribution_columns(run, exact))
        self._rows.append(row)
        if run.eviction:
            since, since_gpu = run.since_checkpoint, run.gpu_seconds_since_checkpoint
            self.lost.append(
                LostRun(
                    run.queue,
                    run.queue is not None and run.queue in rules.tree,
                    run.ended_by,
                    run.duration.total_seconds(),
                    None if gpu_seconds is None else float(gpu_seconds),
                    verdict.value,
                    None if run.attribution is None else run.attribution.action,
                    None if exact is None else exact.verdict.value,
                    run.owner_kind,
                    None if since is None else since.total_seconds(),
                    None if since_gpu is None else float(since_gpu),
                )
            )

    def flush(self) -> None:
        """Append the rows recorded since the last flush."""
        append_runs(self._conn, self._tables, self._rows)
        self._rows = []


def run_row(
    run: EndedRun,
    gpu_seconds: Decimal | None,
    rules: RuleSet,
    windows: str,
    verdict: Verdict,
    cut_short: timedelta | None,
    source: str,
    event_id: str,
) -> dict[str, Any]:
    """The ``run_log`` row of ``run`` (``windows``: the rule set's windows as stored)."""
    return {
        "uid": run.uid,
        "end_source": source,
        "end_event_id": event_id,
        "queue": run.queue,
        "node_pool": run.node_pool,
        "preemptibility": run.preemptibility,
        "run_start": run.start,
        "run_end": run.end,
        "ended_by": run.ended_by,
        "eviction": run.eviction,
        "gpus": run.gpus,
        "gpu_seconds": gpu_seconds,
        "preempt_min_runtime": rules.preempt.min_runtime,
        "preempt_resolved_from": rules.preempt.resolved_from,
        "shortest_reclaim_min_runtime": rules.shortest_reclaim,
        "longest_reclaim_min_runtime": rules.longest_reclaim,
        "windows": windows,
        "protection": verdict.value,
        "cut_short": cut_short,
        "owner_kind": None if run.owner is None else run.owner.kind,
        "owner_name": None if run.owner is None else run.owner.name,
        "owner_uid": None if run.owner is None else run.owner.uid,
        "core_pods": run.core,
        "last_checkpoint": run.checkpoint,
        "gpu_seconds_since_checkpoint": run.gpu_seconds_since_checkpoint,
    }


_UNATTRIBUTED: Final[Mapping[str, Any]] = MappingProxyType(
    dict.fromkeys(
        (
            "eviction_source",
            "eviction_action",
            "evictor",
            "evictor_queue",
            "evicted_at",
            "exact_verdict",
            "applied_window",
            "applied_min_runtime",
            "applied_cut_short",
        )
    )
)


def attribution_columns(run: EndedRun, exact: ExactJudgement | None) -> Mapping[str, Any]:
    """The ``run_log`` columns of who evicted ``run`` and the exact verdict (all NULL for a run
    without an attribution)."""
    attribution = run.attribution
    if attribution is None:
        return _UNATTRIBUTED
    rule = None if exact is None else exact.rule
    return {
        "eviction_source": attribution.source,
        "eviction_action": attribution.action,
        "evictor": attribution.evictor,
        "evictor_queue": attribution.evictor_queue,
        "evicted_at": attribution.at,
        "exact_verdict": None if exact is None else exact.verdict.value,
        "applied_window": None
        if rule is None
        else json.dumps(window_json(rule.window), separators=(",", ":")),
        "applied_min_runtime": None if rule is None else rule.window.min_runtime,
        "applied_cut_short": None if exact is None else exact.cut_short,
    }


def window_json(window: RuleWindow) -> dict[str, Any]:
    """A rule window as stored in ``run_log.windows`` (``min_runtime`` in seconds)."""
    return {
        "rule": window.rule.value,
        "reclaimers": window.reclaimers.value,
        "lca": window.lca,
        "walk_start": window.walk_start,
        "min_runtime": window.min_runtime.total_seconds(),
        "resolved_from": window.resolved_from,
    }


def windows_of(stored: Sequence[Mapping[str, Any]]) -> tuple[RuleWindow, ...]:
    """The rule windows of a stored ``run_log.windows`` (what ``core.judge`` takes)."""
    return tuple(
        RuleWindow(
            ProtectionRule(item["rule"]),
            Reclaimers(item["reclaimers"]),
            timedelta(microseconds=round(Decimal(str(item["min_runtime"])) * 1_000_000)),
            item.get("resolved_from"),
            item.get("lca"),
            item.get("walk_start"),
        )
        for item in stored
    )
