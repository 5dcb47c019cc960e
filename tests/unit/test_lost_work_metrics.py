"""The processor's metrics of work evictions took away: seconds, GPU-seconds by queue, verdicts."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from minruntime.ingest import BatchOutcome
from minruntime.ingest.runs import LostRun
from minruntime.stream.metrics import MAX_QUEUE_LABELS, ProcessorMetrics


def lost(queue: str | None, *, known: bool = True, gpu_seconds: float | None = 100.0) -> LostRun:
    return LostRun(queue, known, "evicted", 600.0, gpu_seconds, "definite")


def test_lost_runs_are_counted_by_how_they_ended_their_queue_and_their_verdict() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    outcome = BatchOutcome(
        lost_runs=[
            lost("team-a"),
            lost("team-a", gpu_seconds=50.0),
            LostRun("team-b", True, "requeued", 7200.0, 3600.0, "none"),
            lost(None, known=False),
            lost("gone", known=False, gpu_seconds=None),
        ]
    )
    metrics.observe("podgroups", outcome, 0.1, {})

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("minruntime_run_seconds_lost_count", ended_by="evicted") == 4
    assert value("minruntime_run_seconds_lost_bucket", ended_by="requeued", le="3600.0") == 0
    assert value("minruntime_run_seconds_lost_bucket", ended_by="requeued", le="7200.0") == 1
    assert value("minruntime_gpu_seconds_lost_total", queue="team-a") == 150
    assert value("minruntime_gpu_seconds_lost_total", queue="team-b") == 3600
    # Not a queue of the tree (a placeholder, a deleted queue): one label value for all.
    assert value("minruntime_gpu_seconds_lost_total", queue="unknown") == 100
    assert value("minruntime_protection_violations_total", verdict="definite") == 4
    assert value("minruntime_protection_violations_total", verdict="none") is None


def test_queue_labels_are_capped_and_the_rest_is_other() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    queues = [f"q{i}" for i in range(MAX_QUEUE_LABELS + 5)]
    metrics.observe("podgroups", BatchOutcome(lost_runs=[lost(q) for q in queues]), 0.1, {})
    labels = {
        sample.labels["queue"]
        for family in registry.collect()
        if family.name == "minruntime_gpu_seconds_lost"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert len(labels) == MAX_QUEUE_LABELS + 1
    assert "other" in labels
    # A queue already labelled keeps its label.
    metrics.observe("podgroups", BatchOutcome(lost_runs=[lost("q0")]), 0.1, {})
    assert registry.get_sample_value("minruntime_gpu_seconds_lost_total", {"queue": "q0"}) == 200
    assert registry.get_sample_value("minruntime_gpu_seconds_lost_total", {"queue": "other"}) == 500


def test_attributed_evictions_are_counted_by_action_and_exact_verdict() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    outcome = BatchOutcome(
        lost_runs=[
            LostRun("team-a", True, "evicted", 60.0, 10.0, "possible", "reclaim", "violated"),
            LostRun("team-a", True, "evicted", 30.0, 5.0, "definite", "reclaim", "honoured"),
            LostRun(
                "team-a", True, "evicted", 20.0, None, "definite", "consolidation", "unguarded"
            ),
            LostRun("team-a", True, "evicted", 10.0, 1.0, "definite", "backfill", None),
            lost("team-b"),
        ]
    )
    metrics.observe("podgroups", outcome, 0.1, {})

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    evictions = "minruntime_evictions_total"
    assert value(evictions, action="reclaim", verdict="violated") == 1
    assert value(evictions, action="reclaim", verdict="honoured") == 1
    assert value(evictions, action="consolidation", verdict="unguarded") == 1
    # Another scheduler's word, and an unattributed run: bounded label values.
    assert value(evictions, action="other", verdict="definite") == 1
    assert value(evictions, action="none", verdict="definite") == 1
    assert value("minruntime_run_seconds_lost_by_action_total", action="reclaim") == 90
    assert value("minruntime_gpu_seconds_lost_by_action_total", action="reclaim") == 15
    # An exact verdict replaces definite / possible; honoured and unguarded are no violation.
    assert value("minruntime_protection_violations_total", verdict="violated") == 1
    assert value("minruntime_protection_violations_total", verdict="possible") == 0
    assert value("minruntime_protection_violations_total", verdict="definite") == 2


def test_evicted_runs_are_counted_by_queue_owner_kind_and_protection_for_the_slo() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    runs = [
        LostRun("team-a", True, "evicted", 60.0, 10.0, "definite", owner_kind="JobSet"),
        LostRun("team-a", True, "evicted", 60.0, 10.0, "none", "reclaim", "honoured", "JobSet"),
        LostRun("team-a", True, "evicted", 60.0, 10.0, "none", "reclaim", "violated", "RayJob"),
        LostRun("team-a", True, "evicted", 60.0, 10.0, "possible", owner_kind="MyOperatorKind"),
        LostRun("team-b", True, "requeued", 60.0, 10.0, "none"),
    ]
    metrics.observe("podgroups", BatchOutcome(lost_runs=runs), 0.1, {})

    def value(queue: str, kind: str, protection: str) -> float | None:
        labels = {"queue": queue, "owner_kind": kind, "protection": protection}
        return registry.get_sample_value("minruntime_evicted_runs_total", labels)

    assert value("team-a", "JobSet", "inside") == 1
    assert value("team-a", "JobSet", "outside") == 1  # an exact verdict replaces "none"
    assert value("team-a", "RayJob", "inside") == 1
    assert value("team-a", "other", "maybe") == 1  # a kind not known: never its name
    assert value("team-b", "none", "outside") == 1


def test_a_known_checkpoint_makes_the_lost_figures_the_work_since_it() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    saved = LostRun("team-a", True, "evicted", 7200.0, 14400.0, "none", "reclaim", None, None)
    outcome = BatchOutcome(
        lost_runs=[
            # Ran 2h on 2 GPUs, checkpointed 10 minutes before the eviction.
            saved._replace(seconds_since_checkpoint=600.0, gpu_seconds_since_checkpoint=1200.0),
            # No checkpoint known: the whole run.
            saved,
        ]
    )
    metrics.observe("podgroups", outcome, 0.1, {})

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("minruntime_gpu_seconds_lost_total", queue="team-a") == 1200 + 14400
    assert value("minruntime_gpu_seconds_lost_by_action_total", action="reclaim") == 1200 + 14400
    assert value("minruntime_run_seconds_lost_by_action_total", action="reclaim") == 600 + 7200
    assert value("minruntime_run_seconds_lost_bucket", ended_by="evicted", le="600.0") == 1
    assert value("minruntime_run_seconds_lost_sum", ended_by="evicted") == 600 + 7200
