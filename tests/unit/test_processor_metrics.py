"""The processor's lag gauge follows the partitions the process owns (several instances)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from minruntime.ingest import BatchOutcome
from minruntime.stream.metrics import ProcessorMetrics


def _lags(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["role"], sample.labels["partition"]): sample.value
        for family in registry.collect()
        if family.name == "minruntime_consumer_lag"
        for sample in family.samples
    }


def test_a_partition_given_up_in_a_rebalance_no_longer_reports_its_last_lag() -> None:
    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)
    metrics.observe("podgroups", BatchOutcome(), 0.1, {0: 40, 1: 7, 2: 0})
    metrics.observe("nodes", BatchOutcome(), 0.1, {0: 3})
    assert _lags(registry) == {
        ("podgroups", "0"): 40,
        ("podgroups", "1"): 7,
        ("podgroups", "2"): 0,
        ("nodes", "0"): 3,
    }

    # Another instance joined: this one keeps podgroups 1 and gains nodes 2 (no batch yet).
    metrics.owned([("podgroups", 1), ("nodes", 2)])
    assert _lags(registry) == {("podgroups", "1"): 7}

    metrics.observe("nodes", BatchOutcome(), 0.1, {2: 5})
    metrics.owned([("nodes", 2)])
    metrics.owned([("nodes", 2)])  # the same assignment again: nothing left to drop
    assert _lags(registry) == {("nodes", "2"): 5}


def test_ignored_values_are_counted_by_field_and_every_field_is_exported_from_the_start() -> None:
    from collections import Counter

    from minruntime.core import IgnoredValue

    registry = CollectorRegistry()
    metrics = ProcessorMetrics(registry)

    def ignored(field: str) -> float | None:
        return registry.get_sample_value("minruntime_ignored_values_total", {"field": field})

    assert {field.value: ignored(field.value) for field in IgnoredValue} == {
        "preemption_delay": 0,
        "last_eviction_timestamp": 0,
        "max_requeues": 0,
        "checkpoint_grace": 0,
        "checkpointed_at": 0,
        "top_owner_metadata": 0,
    }
    outcome = BatchOutcome(ignored_values=Counter({"preemption_delay": 2}))
    outcome.add(BatchOutcome(ignored_values=Counter({"last_eviction_timestamp": 1})))
    metrics.observe("podgroups", outcome, 0.1, {})
    assert (ignored("preemption_delay"), ignored("last_eviction_timestamp")) == (2, 1)
