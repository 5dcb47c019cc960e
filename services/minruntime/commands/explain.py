"""`minruntime explain`: why a podgroup is or is not protected, then or now.

The data comes from ``minruntime.audit.explain`` (also what ``--json`` prints); this module
parses the options, opens the state (live, or replayed up to ``--at``) and renders. Notes go to
stderr, so ``--json`` output stays one JSON document. The protection table is the `protection`
group's (``commands.forecast``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from minruntime.audit import explain as explaining
from minruntime.audit.asof import ReadUnit, state_at
from minruntime.audit.disruption import DisruptionFacts
from minruntime.audit.explain_model import (
    Elasticity,
    Explanation,
    LastEviction,
    PreemptionDelayFacts,
    RulePath,
    Verdict,
    describe,
    handshake_text,
)
from minruntime.audit.protection import moment_text
from minruntime.audit.requeue_cap import RequeueCapFacts, cap_origin
from minruntime.audit.violations import who_evicted
from minruntime.commands.common import At, Json, Uid, option, parse_at, units
from minruntime.commands.render import counted, print_json, rfc3339, wide_console
from minruntime.core import format_duration

PreemptorQueue = Annotated[
    str | None,
    option(
        "--preemptor-queue",
        metavar="QUEUE",
        help="The preemptor's queue: omitted or the podgroup's own queue → the preempt rule; "
        "another queue → the reclaim rule.",
    ),
]


def explain_command(
    uid: Uid, preemptor_queue: PreemptorQueue = None, at: At = None, json_output: Json = False
) -> None:
    """Why a podgroup is or is not protected: the rule, the resolution path, the window."""
    instant = parse_at(at)
    with _state(instant, (uid,)) as unit:
        explanation = explaining.explain(unit, uid, instant, preemptor_queue)
    if json_output:
        print_json(describe(explanation))
    else:
        wide_console().print(render_explanation(explanation, as_of=instant is not None))
    if explanation.disagreements:
        print(
            "minruntime: error: the rule engine and the SQL read surface disagree (a bug, please "
            f"report it): {'; '.join(explanation.disagreements)}",
            file=sys.stderr,
        )
        raise typer.Exit(1)


# -- the state to read ------------------------------------------------------------------------


@contextmanager
def _state(at: datetime | None, podgroups: tuple[str, ...] = ()) -> Iterator[ReadUnit]:
    """The live state or the state at ``at`` (database trouble: the CLI's one line).

    At ``at``: the running podgroups, and of the ended ones only ``podgroups``.
    """
    with units() as made, state_at(made, at, podgroups=podgroups) as unit:
        yield unit


# -- explain --------------------------------------------------------------------------------------


def render_explanation(explanation: Explanation, *, as_of: bool) -> RenderableType:
    """The explanation as labelled lines for a terminal."""
    facts = explanation.podgroup
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    owner = f" ({escape(facts.namespace or '')}/{escape(facts.name)})" if facts.name else ""
    grid.add_row("podgroup", f"{escape(facts.uid)}{owner}")
    grid.add_row("when", moment_text(explanation.at, as_of))
    grid.add_row(
        "queue",
        escape(facts.queue) if facts.queue is not None else "(none: never submitted)",
    )
    grid.add_row("node pool", escape(facts.node_pool))
    grid.add_row("status", _status(explanation))
    if explanation.rule is not None:
        _add_rule(grid, explanation.rule, facts.node_pool)
        grid.add_row(
            "window",
            f"{rfc3339(facts.start_time)} → {rfc3339(explanation.verdict.protected_until)}",
        )
    if explanation.elastic is not None:
        grid.add_row("elastic", _elastic(explanation.elastic, explanation.verdict.protected))
    grid.add_row("verdict", verdict_text(explanation.verdict, explanation.at, explanation.rule))
    delay = explanation.preemption_delay
    if delay is not None:
        grid.add_row("preemption delay", _delay_text(delay))
    if explanation.requeue_cap is not None:
        grid.add_row("requeue cap", requeue_cap_text(explanation.requeue_cap, facts.node_pool))
        if explanation.requeue_cap.annotation_problem is not None:
            grid.add_row("note", escape(explanation.requeue_cap.annotation_problem))
    if explanation.disruption is not None:
        grid.add_row("disruption", escape(disruption_text(explanation.disruption)))
        for problem in explanation.disruption.problems:
            grid.add_row("note", escape(problem))
    if explanation.last_eviction is not None:
        grid.add_row("last eviction", _last_eviction_text(explanation.last_eviction))
    if explanation.requeue_shares is not None:
        grid.add_row("requeue shares", escape(requeue_shares_text(explanation.requeue_shares)))
    if explanation.requeue_abandoned is not None:
        abandoned = explanation.requeue_abandoned
        cleared = abandoned.cleared_not_before
        grid.add_row(
            "requeue abandoned",
            f"{rfc3339(abandoned.at)}: {escape(abandoned.reason)} (the evictor could not carry"
            " it out by its deadline; the run goes on"
            + (f", its cooldown until {rfc3339(cleared)} cleared)" if cleared else ")"),
        )
    if explanation.checkpoint is not None:
        grid.add_row("checkpoint", escape(handshake_text(explanation.checkpoint)))
    for note in explanation.notes:
        grid.add_row("note", escape(note))
    for disagreement in explanation.disagreements:
        grid.add_row("[red]BUG[/]", f"[red]{escape(disagreement)}[/]")
    return grid


def _last_eviction_text(last: LastEviction) -> str:
    """Who evicted the last evicted run, and the verdict under the rule that applied."""
    who = who_evicted(last.action, last.evictor, last.evictor_queue, last.evicted_at)
    text = f"run {rfc3339(last.run_start)} → {rfc3339(last.run_end)} {who} [{last.source}]"
    if last.exact_verdict is None:
        return escape(f"{text}: {last.protection} against every possible preemptor")
    cut = last.applied_cut_short
    verdict = last.exact_verdict + (f", cut {_span(cut)} short" if cut else "")
    if last.applied_min_runtime is not None:
        verdict += f" (its window {_span(last.applied_min_runtime)})"
    return escape(f"{text}: {verdict}")


def _delay_text(delay: PreemptionDelayFacts) -> str:
    """The preemption-delay window of a podgroup that is not running, in one line."""
    window = (
        f"{_span(delay.delay)} from {escape(delay.source)}; window {rfc3339(delay.window_start)}"
        f" ({escape(delay.started_by)}) → {rfc3339(delay.ends_at)}"
    )
    if delay.inside:
        return (
            f"{window}: INSIDE, not a requeue beneficiary until {rfc3339(delay.ends_at)}"
            f" ({_span(delay.remaining)} left)"
        )
    return f"{window}: over, it may be a requeue beneficiary"


def _status(explanation: Explanation) -> str:
    facts = explanation.podgroup
    if facts.status == "running":
        pods = counted(facts.running_pods, "running pod")
        return f"running since {rfc3339(facts.start_time)}, {pods}"
    if facts.status == "finished" and facts.last_start_time is not None:
        return f"finished (last run {rfc3339(facts.last_start_time)} → {rfc3339(facts.ended_at)})"
    return facts.status


def _add_rule(grid: Any, rule: RulePath, node_pool: str) -> None:
    preemptor = escape(rule.preemptor_queue or "(none)")
    if rule.rule == "preempt":
        grid.add_row("rule", f"preempt: the preemptor is in the podgroup's own queue {preemptor}")
    else:
        grid.add_row(
            "rule",
            f"reclaim by a job in queue {preemptor}: reclaimResolveMethod "
            f"{rule.reclaim_resolve_method} ({_config_owner(rule.config_node_pool, node_pool)})",
        )
    grid.add_row("victim path", _path(rule.victim_path))
    if rule.rule != "preempt":
        grid.add_row("reclaimer path", _path(rule.reclaimer_path))
    if rule.walk_start is not None:
        grid.add_row("walk starts at", escape(_walk_start(rule)))
        steps = [
            f"{escape(step.queue)}: "
            + (format_duration(step.value) if step.value is not None else "[dim]unset[/]")
            + ("  [bold]← applies[/]" if step.applies else "")
            for step in rule.walk
        ]
        if not any(step.applies for step in rule.walk):
            steps.append("no queue on the way up sets it: the default applies")
        grid.add_row(f"walk up ({rule.field})", "\n".join(steps))
    default_name = (
        "defaultPreemptMinRuntime" if rule.rule == "preempt" else "defaultReclaimMinRuntime"
    )
    if rule.resolved_from is not None:
        applied = f"from queue {escape(rule.resolved_from)}"
    else:
        applied = (
            f"the node pool's default ({default_name} = "
            f"{format_duration(rule.default_min_runtime)}, "
            f"{_config_owner(rule.config_node_pool, node_pool)})"
        )
    grid.add_row("min runtime", f"[bold]{format_duration(rule.min_runtime)}[/], {applied}")


def _walk_start(rule: RulePath) -> str:
    start = rule.walk_start or ""
    if rule.rule == "reclaim-lca":
        if rule.lca is None:
            return f"{start}: different roots, only the victim's root counts"
        if rule.lca == start:
            return f"{start}: the victim's own queue is the lowest common ancestor"
        return f"{start}: one step below the lowest common ancestor {rule.lca}, toward the victim"
    if rule.rule == "reclaim-queue":
        return f"{start}: the victim's own queue (the reclaimer's queue does not matter)"
    return f"{start}: the victim's own queue"


def _config_owner(config_node_pool: str | None, node_pool: str) -> str:
    if config_node_pool is None:
        return f"built-in defaults: no configuration for node pool {node_pool} or default"
    if config_node_pool == node_pool:
        return f"configuration of node pool {node_pool}"
    return f"configuration of node pool {config_node_pool}; {node_pool} has none of its own"


def _elastic(elastic: Elasticity, protected: bool) -> str:
    pods = counted(elastic.evictable_pods, "pod")
    first = f"{'yes' if elastic.is_elastic else 'no'}: may lose {pods} now"
    if elastic.semi_preemptible:
        first += (
            ", protected or not: semi-preemptible, each subgroup's minAvailable running pods "
            "(the core) are never evictable"
        )
    elif not protected:
        first += " (not protected: any running pod)"
    lines = [first] + [
        f"subgroup {sub.name}: minAvailable {sub.min_available}, {counted(sub.pods, 'pod')}, "
        f"{sub.running} running → {sub.evictable} may be evicted"
        + (f" ({sub.core} in the core)" if elastic.semi_preemptible else "")
        for sub in elastic.subgroups
    ]
    return "\n".join(lines)


def verdict_text(verdict: Verdict, at: datetime, rule: RulePath | None) -> str:
    """PROTECTED until when, or NOT PROTECTED since when (or why never)."""
    if verdict.protected:
        return (
            f"[bold green]PROTECTED[/] until {rfc3339(verdict.protected_until)} "
            f"({_span(verdict.remaining)} left)"
        )
    if rule is None or verdict.protected_until is None:
        return "[bold red]NOT PROTECTED[/]: it is not running"
    return (
        f"[bold red]NOT PROTECTED[/] since {rfc3339(verdict.protected_until)} "
        f"({_span(at - verdict.protected_until)} ago)"
    )


def requeue_shares_text(shares: dict[str, Any]) -> str:
    """Why the newest requeue was rolled back for beneficiary_over_quota: KAI's rule and the
    shares of the beneficiary's and the victim's queues (docs/rule-engine.md)."""
    lines = [
        f"rolled back as beneficiary_over_quota: KAI's {shares.get('rule')} rule at queue "
        f"{shares.get('queue')}"
    ]
    for side in ("beneficiary", "victim"):
        view = shares.get(side)
        if not isinstance(view, dict):
            continue
        lines.append(
            f"{side} queue {view.get('queue')}: deserved {_amount(view.get('deserved'))}, "
            f"fair share {_amount(view.get('fairShare'))}, limit {_amount(view.get('limit'))}, "
            f"allocated {_amount(view.get('allocatedBefore'))} → "
            f"{_amount(view.get('allocatedAfter'))} GPU"
        )
    return "\n".join(lines)


def _amount(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "unlimited" if value < 0 else f"{value:g}"
    return "?"


def requeue_cap_text(cap: RequeueCapFacts, node_pool: str) -> str:
    """The cap in force, where from, the requeues it counts and when it frees (SEMANTICS §10)."""
    if cap.limit is None:
        return "unlimited (no maxRequeues for the node pool, no valid annotation)"
    window = f"within {_span(cap.window)}" if cap.window is not None else "ever (no window)"
    text = (
        f"{cap.limit} {window}, from {escape(cap_origin(cap, node_pool))}; "
        f"{counted(len(cap.requeues), 'committed requeue')} counted"
    )
    if cap.oldest_leaves_at is not None:
        text += f", the oldest leaves the window at {rfc3339(cap.oldest_leaves_at)}"
    if not cap.reached:
        return text
    until = f" until {rfc3339(cap.frees_at)}" if cap.frees_at is not None else " for good"
    return f"{text}: [bold red]REACHED[/], skipped as requeue_limit{until}"


def disruption_text(facts: DisruptionFacts) -> str:
    """The budget and the gap in force, where from, what they count, and whether one more
    eviction would be skipped now and until when (plain text)."""
    parts = []
    if facts.max_evictions_per_window is not None and facts.eviction_window is not None:
        parts.append(
            f"budget {facts.max_evictions_per_window} per {_span(facts.eviction_window)}"
            f" ({counted(facts.counted or 0, 'eviction')} of the queue in it)"
        )
    if facts.min_eviction_gap is not None:
        owner = facts.owner
        whose = "no top owner known" if owner is None else f"owner {owner.kind}/{owner.name}"
        if owner is not None and facts.owner_last_evicted is not None:
            whose += f", last evicted {rfc3339(facts.owner_last_evicted)}"
        parts.append(f"gap {_span(facts.min_eviction_gap)} per owner ({whose})")
    text = "; ".join(parts) or "off"
    source = ", ".join(name.rpartition("/")[2] for name in facts.overridden_by)
    text += f"; from the queue's {source}" if source else "; from the node pool"
    if facts.refused_by is not None and facts.frees_at is not None:
        text += (
            f": one more eviction is skipped ({facts.refused_by}) until {rfc3339(facts.frees_at)}"
        )
    return text


def _span(span: timedelta) -> str:
    # Whole seconds: microseconds of a database clock are noise to a reader.
    return format_duration(timedelta(seconds=max(0, int(span.total_seconds()))))


def _path(path: tuple[str, ...] | None) -> str:
    return " → ".join(escape(name) for name in path) if path else "(not in the queue tree)"
