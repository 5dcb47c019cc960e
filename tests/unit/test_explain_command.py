"""`protection` and `explain`: rendering, JSON, and the errors that never reach the database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from minruntime.audit.explain_model import (
    Elasticity,
    Explanation,
    PodGroupFacts,
    RulePath,
    SubgroupAllowance,
    Verdict,
    WalkStep,
    describe,
)
from minruntime.audit.protection import (
    ProtectionRow,
    ProtectionTable,
    describe_row,
    resolved_from_label,
)
from minruntime.cli import main
from minruntime.commands.explain import (
    render_explanation,
    verdict_text,
)
from minruntime.commands.forecast import render_protection
from minruntime.commands.render import print_json
from tests.cloudevents import T0
from tests.unit.test_cli import one_error_line

MIN = timedelta(minutes=1)


def text_of(renderable: Any) -> str:
    console = Console(width=160, record=True, highlight=False)
    console.print(renderable)
    return console.export_text()


def row(uid: str = "pg-1", **changes: Any) -> ProtectionRow:
    fields: dict[str, Any] = {
        "uid": uid,
        "queue": "leaf1",
        "node_pool": "default",
        "start_time": T0,
        "min_runtime": 5 * MIN,
        "resolved_from": "leaf1",
        "protected_until": T0 + 5 * MIN,
        "is_protected": True,
        "evictable_pods": 0,
    }
    return ProtectionRow(**{**fields, **changes})


def facts(**changes: Any) -> PodGroupFacts:
    return replace(
        PodGroupFacts(
            uid="pg-1",
            name="train",
            namespace="team",
            queue="leaf1",
            node_pool="default",
            status="running",
            preemptible=True,
            start_time=T0,
            last_start_time=T0,
            ended_at=None,
            running_pods=3,
        ),
        **changes,
    )


def lca_rule(**changes: Any) -> RulePath:
    fields: dict[str, Any] = {
        "rule": "reclaim-lca",
        "preemptor_queue": "leaf3",
        "field": "reclaimMinRuntime",
        "reclaim_resolve_method": "lca",
        "config_node_pool": "default",
        "victim_path": ("A", "B", "C", "leaf1"),
        "reclaimer_path": ("A", "B", "D", "leaf3"),
        "lca": "B",
        "walk_start": "C",
        "walk": (WalkStep("C", None, False), WalkStep("B", 10 * MIN, True)),
        "resolved_from": "B",
        "min_runtime": 10 * MIN,
        "default_min_runtime": timedelta(0),
        "reason": "lowest common ancestor 'B'",
    }
    return RulePath(**{**fields, **changes})


def elastic(protected: bool) -> Elasticity:
    return Elasticity(
        True,
        (
            SubgroupAllowance("launcher", 1, 1, 1, 0 if protected else 1),
            SubgroupAllowance("workers", 1, 2, 2, 1 if protected else 2),
        ),
        1 if protected else 3,
    )


def explanation(at: datetime = T0 + 4 * MIN, **changes: Any) -> Explanation:
    protected = at < T0 + 10 * MIN
    fields: dict[str, Any] = {
        "at": at,
        "podgroup": facts(),
        "rule": lca_rule(),
        "elastic": elastic(protected),
        "verdict": Verdict(
            protected, T0, T0 + 10 * MIN, T0 + 10 * MIN - at if protected else timedelta(0)
        ),
    }
    return Explanation(**{**fields, **changes})


# -- protection ------------------------------------------------------------------------------


def test_the_table_names_the_default_of_the_node_pool() -> None:
    table = ProtectionTable(
        at=T0 + MIN,
        rule="preempt",
        reclaimer_queue=None,
        rows=(
            row(),
            row(
                "pg-2",
                queue="nowhere",
                node_pool="a100",
                resolved_from=None,
                is_protected=False,
                evictable_pods=2,
            ),
            row("pg-3", queue=None, start_time=None, protected_until=None, is_protected=False),
        ),
    )
    text = text_of(render_protection(table, as_of=False))
    assert "Protection — preempt rule (a preemptor in the podgroup's own queue)" in text
    assert "now (2026-11-21T10:01:00Z), live" in text
    pg1, pg2, pg3 = (line for line in text.splitlines() if "pg-" in line)
    for fragment in ("leaf1", "2026-11-21T10:00:00Z", "5m", "2026-11-21T10:05:00Z", "yes"):
        assert fragment in pg1
    assert "default (node pool a100)" in pg2
    assert " no " in pg2
    assert pg2.rstrip(" │").endswith("2")
    assert "(none)" in pg3
    assert " - " in pg3


def test_an_empty_table_says_so_and_an_as_of_table_says_when() -> None:
    table = ProtectionTable(at=T0, rule="reclaim", reclaimer_queue="leaf3", rows=())
    text = text_of(render_protection(table, as_of=True))
    assert "reclaim rule (a reclaimer in queue leaf3)" in text
    assert "at 2026-11-21T10:00:00Z, as the service had it then" in text
    assert "no running podgroups" in text


def test_a_narrow_terminal_gets_one_block_per_podgroup() -> None:
    long_uid = "sweep-2-with-a-uid-longer-than-a-narrow-column"
    table = ProtectionTable(
        at=T0, rule="preempt", reclaimer_queue=None, rows=(row(long_uid, resolved_from=None),)
    )
    console = Console(width=80, record=True, highlight=False)
    console.print(render_protection(table, as_of=False, width=console.width))
    text = " ".join(console.export_text().split())
    for fragment in (
        f"{long_uid} in leaf1: protected? yes, evictable pods 0",
        "min runtime 5m from default (node pool default); start 2026-11-21T10:00:00Z,",
        "protected until 2026-11-21T10:05:00Z",
    ):
        assert fragment in text


def test_resolved_from_label() -> None:
    assert resolved_from_label("B", "default") == "B"
    assert resolved_from_label(None, "a100") == "default (node pool a100)"


def test_json_rows_carry_seconds_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    print_json([describe_row(row(min_runtime=timedelta(minutes=90)))])
    (parsed,) = json.loads(capsys.readouterr().out)
    assert parsed == {
        "uid": "pg-1",
        "queue": "leaf1",
        "node_pool": "default",
        "start_time": "2026-11-21T10:00:00Z",
        "min_runtime": 5400.0,
        "min_runtime_text": "1h30m",
        "resolved_from": "leaf1",
        "protected_until": "2026-11-21T10:05:00Z",
        "is_protected": True,
        "evictable_pods": 0,
    }


# -- explain ---------------------------------------------------------------------------------


def test_a_reclaim_lca_explanation_reads_top_to_bottom() -> None:
    text = text_of(render_explanation(explanation(), as_of=False))
    lines = [line.rstrip() for line in text.splitlines()]
    expected = [
        "podgroup",
        "pg-1 (team/train)",
        "queue",
        "rule",
        "reclaim by a job in queue leaf3: reclaimResolveMethod lca "
        "(configuration of node pool default)",
        "A → B → C → leaf1",
        "A → B → D → leaf3",
        "C: one step below the lowest common ancestor B, toward the victim",
        "C: unset",
        "B: 10m  ← applies",
        "10m, from queue B",
        "2026-11-21T10:00:00Z → 2026-11-21T10:10:00Z",
        "yes: may lose 1 pod now",
        "subgroup workers: minAvailable 1, 2 pods, 2 running → 1 may be evicted",
        "PROTECTED until 2026-11-21T10:10:00Z (6m left)",
    ]
    # Each fragment appears, in this order.
    position = 0
    for fragment in expected:
        found = next((i for i in range(position, len(lines)) if fragment in lines[i]), None)
        assert found is not None, f"{fragment!r} not found after line {position}:\n{text}"
        position = found


def test_after_the_window_every_running_pod_may_go() -> None:
    text = text_of(render_explanation(explanation(at=T0 + 25 * MIN), as_of=True))
    assert "NOT PROTECTED since 2026-11-21T10:10:00Z (15m ago)" in text
    assert "may lose 3 pods now (not protected: any running pod)" in text
    assert "at 2026-11-21T10:25:00Z, as the service had it then" in text


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        (
            lca_rule(lca=None, walk_start="research", walk=(WalkStep("research", MIN, True),)),
            "research: different roots, only the victim's root counts",
        ),
        (
            lca_rule(lca="C", walk_start="C", victim_path=("A", "B", "C")),
            "C: the victim's own queue is the lowest common ancestor",
        ),
        (
            lca_rule(
                rule="reclaim-queue", reclaim_resolve_method="queue", lca=None, walk_start="leaf1"
            ),
            "leaf1: the victim's own queue (the reclaimer's queue does not matter)",
        ),
        (
            lca_rule(rule="preempt", field="preemptMinRuntime", lca=None, walk_start="leaf1"),
            "preempt: the preemptor is in the podgroup's own queue leaf3",
        ),
    ],
)
def test_where_the_walk_starts_is_said_in_words(rule: RulePath, fragment: str) -> None:
    assert fragment in text_of(render_explanation(explanation(rule=rule), as_of=False))


def test_the_default_names_its_argument_and_its_node_pool() -> None:
    rule = lca_rule(
        walk=(WalkStep("C", None, False), WalkStep("B", None, False), WalkStep("A", None, False)),
        resolved_from=None,
        min_runtime=2 * MIN,
        default_min_runtime=2 * MIN,
        config_node_pool="default",
    )
    podgroup = facts(node_pool="a100")
    text = text_of(render_explanation(explanation(rule=rule, podgroup=podgroup), as_of=False))
    assert "no queue on the way up sets it: the default applies" in text
    assert (
        "2m, the node pool's default (defaultReclaimMinRuntime = 2m, configuration of node "
        "pool default; a100 has none of its own)"
    ) in text
    builtin = text_of(
        render_explanation(
            explanation(rule=lca_rule(config_node_pool=None, resolved_from=None)), as_of=False
        )
    )
    assert "built-in defaults: no configuration for node pool default or default" in builtin


def test_unknown_queues_show_no_walk_and_a_note() -> None:
    rule = lca_rule(victim_path=None, lca=None, walk_start=None, walk=(), resolved_from=None)
    note = "the podgroup's queue 'nowhere' is not in the queue tree"
    text = text_of(render_explanation(explanation(rule=rule, notes=(note,)), as_of=False))
    assert "(not in the queue tree)" in text
    assert "walk up" not in text
    assert any(line.startswith("note") and note in line for line in text.splitlines())


def test_a_podgroup_that_is_not_running() -> None:
    finished = explanation(
        podgroup=facts(status="finished", ended_at=T0 + MIN, running_pods=0, start_time=None),
        rule=None,
        elastic=None,
        verdict=Verdict(False, None, None, timedelta(0)),
        notes=("its last run ended at 2026-11-21T10:01:00Z",),
    )
    text = text_of(render_explanation(finished, as_of=False))
    assert "finished (last run 2026-11-21T10:00:00Z → 2026-11-21T10:01:00Z)" in text
    assert "NOT PROTECTED: it is not running" in text
    assert "window" not in text
    assert "elastic" not in text


def test_verdict_text_rounds_to_whole_seconds() -> None:
    verdict = Verdict(True, T0, T0 + MIN, timedelta(seconds=12, microseconds=345))
    assert verdict_text(verdict, T0, lca_rule()).endswith("(12s left)")


def test_describe_is_json_with_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    print_json(describe(explanation()))
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["rule"]["walk"] == [
        {"queue": "C", "value": None, "applies": False},
        {"queue": "B", "value": 600.0, "applies": True},
    ]
    assert parsed["verdict"] == {
        "protected": True,
        "start_time": "2026-11-21T10:00:00Z",
        "protected_until": "2026-11-21T10:10:00Z",
        "remaining": 360.0,
    }
    assert parsed["elastic"]["subgroups"][1] == {
        "name": "workers",
        "min_available": 1,
        "pods": 2,
        "running": 2,
        "evictable": 1,
        "core": 0,
    }
    assert parsed["disagreements"] == []


# -- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "pg-1", "--at", "yesterday"],
        ["protection", "--at", "2026-13-01T00:00:00Z"],
        ["protection", "--reclaimer-queue"],
    ],
)
def test_bad_options_are_one_line_before_any_database(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINRUNTIME_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    assert one_error_line(argv, capsys).startswith("minruntime: ")


def test_an_unreachable_database_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "MINRUNTIME_DATABASE_URL", "postgresql://nobody:x@127.0.0.1:1/none?connect_timeout=2"
    )
    line = one_error_line(["explain", "pg-1"], capsys)
    assert line.startswith("minruntime: error: cannot read the database: ")


def test_a_disagreement_is_shown_and_fails_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    @contextmanager
    def no_database(
        at: datetime | None, podgroups: tuple[str, ...] = ()
    ) -> Iterator[tuple[None, None]]:
        yield None, None

    broken = explanation(disagreements=("min_runtime: SQL says 1, the rule engine says 2",))
    monkeypatch.setattr("minruntime.commands.explain._state", no_database)
    monkeypatch.setattr("minruntime.audit.explain.explain", lambda *_: broken)
    assert main(["explain", "pg-1"]) == 1
    captured = capsys.readouterr()
    assert "BUG" in captured.out
    assert "SQL says 1" in captured.out
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("minruntime: error: the rule engine and the SQL read surface disagree")


def test_requeue_shares_read_as_one_line_per_queue() -> None:
    from minruntime.commands.explain import requeue_shares_text

    view = {"deserved": 0, "fairShare": 0, "limit": -1, "allocatedBefore": 0, "allocatedAfter": 4}
    text = requeue_shares_text(
        {
            "rule": "fair_share",
            "queue": "burst",
            "beneficiary": {"queue": "burst", **view},
            "victim": {"queue": "train", **view, "deserved": 4, "fairShare": 4, "limit": "?"},
        }
    )
    assert text.splitlines() == [
        "rolled back as beneficiary_over_quota: KAI's fair_share rule at queue burst",
        "beneficiary queue burst: deserved 0, fair share 0, limit unlimited, allocated 0 → 4 GPU",
        "victim queue train: deserved 4, fair share 4, limit ?, allocated 0 → 4 GPU",
    ]
