"""What ``explain`` says of the requeue cap (SEMANTICS.md §10): the facts and their text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from minruntime.audit.requeue_cap import requeue_cap_facts
from minruntime.commands.explain import requeue_cap_text
from minruntime.core import MAX_REQUEUES_ANNOTATION, MinRuntimeConfig

AT = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
POOL_CAP = MinRuntimeConfig(max_requeues=2, max_requeues_window=timedelta(hours=1))


def test_the_worked_example_of_the_docs() -> None:
    facts = requeue_cap_facts(POOL_CAP, "default", {}, [AT - 20 * MINUTE, AT - 50 * MINUTE], AT)
    assert facts.reached
    assert facts.requeues == (AT - 50 * MINUTE, AT - 20 * MINUTE)
    assert facts.oldest_leaves_at == facts.frees_at == AT + 10 * MINUTE
    assert requeue_cap_text(facts, "default") == (
        "2 within 1h, from node pool default's maxRequeues; 2 committed requeues counted, the"
        " oldest leaves the window at 2026-11-21T10:10:00Z: [bold red]REACHED[/], skipped as"
        " requeue_limit until 2026-11-21T10:10:00Z"
    )


def test_requeues_after_the_instant_or_before_the_window_do_not_count() -> None:
    times = [AT + MINUTE, AT - 2 * timedelta(hours=1), AT - MINUTE]
    facts = requeue_cap_facts(POOL_CAP, "default", {}, times, AT)
    assert facts.requeues == (AT - MINUTE,)
    assert not facts.reached
    assert facts.frees_at is None


def test_unlimited_and_annotation_origins_are_said() -> None:
    unlimited = requeue_cap_facts(MinRuntimeConfig(), None, {}, [AT], AT)
    assert unlimited.limit is None
    assert requeue_cap_text(unlimited, "default").startswith("unlimited")
    lowered = requeue_cap_facts(
        MinRuntimeConfig(), None, {MAX_REQUEUES_ANNOTATION: "1"}, [AT - MINUTE], AT
    )
    assert requeue_cap_text(lowered, "gpu").startswith(
        "1 ever (no window), from the podgroup's annotation minruntime.kai.scheduler/max-requeues"
    )
    assert requeue_cap_text(lowered, "gpu").endswith(
        "REACHED[/], skipped as requeue_limit for good"
    )
    inherited = requeue_cap_facts(POOL_CAP, "default", {MAX_REQUEUES_ANNOTATION: "x"}, [], AT)
    assert "the default pool's maxRequeues (node pool gpu has no config" in requeue_cap_text(
        inherited, "gpu"
    )
    assert inherited.annotation_problem is not None
