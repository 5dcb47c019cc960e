"""The work an eviction really lost, through Kafka, the real processor and PostgreSQL.

A run whose workload wrote ``minruntime.kai.scheduler/checkpointed-at`` before it was evicted
shows ``gpu_seconds_since_checkpoint`` beside its whole ``gpu_seconds`` in ``minruntime.runs``;
``minruntime violations`` and the processor's lost-work metrics count the smaller figure; a
checkpoint in the future of its event is ignored and counted (docs/storage.md, docs/audit.md).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests import cloudevents as ce
from tests.e2e.test_violations_cli import Ended, ended, metric_samples, runs_fixture

pytestmark = pytest.mark.stack

CHECKPOINTED_AT = "minruntime.kai.scheduler/checkpointed-at"


def _checkpointed(
    uid: str, queue: str, saved: float, told: float, end: float
) -> list[dict[str, Any]]:
    """A 2-GPU run of ``queue`` from T0 that says at ``told`` it saved at ``saved``, evicted
    at ``end``."""
    submit, allocation, release = ended(uid, queue, end, "evicted")
    note = ce.annotated(uid, {CHECKPOINTED_AT: ce.at(saved)}, time=ce.at(told))
    return [submit, allocation, note, release]


EVENTS = [
    # leaf3: every window is at least 60s, so an eviction at 50s is a definite violation.
    *_checkpointed("saved", "leaf3", 30, 31, 50),  # 20s x 2 GPUs lost, not 50s
    *ended("plain", "leaf3", 50, "evicted"),  # no checkpoint: the whole run
    # A checkpoint "written" 5s in the future of its event: ignored (and counted).
    *_checkpointed("liar", "leaf3", 45, 40, 50),
]
runs = runs_fixture("ck", EVENTS, 3)


def test_the_runs_view_has_the_work_lost_since_the_checkpoint(runs: Ended) -> None:
    found = {
        uid: (saved_at, whole, since)
        for uid, saved_at, whole, since in runs.pipeline.query(
            "SELECT uid, last_checkpoint, gpu_seconds, gpu_seconds_since_checkpoint"
            " FROM minruntime.runs"
        )
    }
    saved_at, whole, since = found["saved"]
    assert ce.stamp(saved_at) == ce.at(30)
    assert (whole, since) == (Decimal("100.000"), Decimal("40.000"))
    assert found["plain"][1:] == (Decimal("100.000"), None)
    assert found["liar"] == (None, Decimal("100.000"), None)


def test_violations_and_the_metrics_count_the_smaller_figure(runs: Ended) -> None:
    rows = {row["uid"]: row for row in runs.cli_json("violations")["rows"]}
    assert (rows["saved"]["gpu_seconds"], rows["saved"]["gpu_seconds_lost"]) == (100, 40)
    assert rows["saved"]["gpu_seconds_since_checkpoint"] == 40
    assert (rows["plain"]["gpu_seconds_lost"], rows["liar"]["gpu_seconds_lost"]) == (100, 100)
    table = runs.cli("violations")
    assert table.returncode == 0, table.stderr
    assert f"checkpointed at {ce.at(30)}: lost 0.01 of the run's 0.03 GPU-h" in table.stdout
    samples = metric_samples(runs.metrics_port)
    assert samples['minruntime_gpu_seconds_lost_total{queue="leaf3"}'] == 40 + 100 + 100
    assert samples['minruntime_run_seconds_lost_sum{ended_by="evicted"}'] == 20 + 50 + 50
    assert samples['minruntime_ignored_values_total{field="checkpointed_at"}'] == 1
