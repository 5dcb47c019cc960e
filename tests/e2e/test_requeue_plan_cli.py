"""`minruntime requeue plan` through Kafka, the real processor and PostgreSQL, as a user runs it.

The installed CLI plans on the state the processor built: it shows the commit the worker will
make, as JSON and as a table, writes nothing (no decision is recorded until a worker runs),
refuses bad options in one line; then a real `requeue-worker` makes exactly the planned
decision, and the plan as of before it still shows it. The harness proves at the end that
`replay --verify` rebuilds the state equal (the dry-runs left nothing behind).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.e2e.harness import PipelineCli, one_error_line, running_pipeline, wait_for
from tests.e2e.test_requeue_worker import OVERRUN, Scene

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Planned(PipelineCli):
    command = ("requeue", "plan")

    scene: Scene
    # An instant after the scene was applied and before any worker ran.
    before_worker: datetime

    def plan(self, *args: str) -> dict[str, Any]:
        shown = self.cli("--json", *args)
        assert shown.returncode == 0, shown.stderr
        document: dict[str, Any] = json.loads(shown.stdout)
        return document

    def recorded(self) -> list[Any]:
        return self.pipeline.query(
            "SELECT uid, outcome, reason, beneficiaries FROM minruntime.requeue_decisions"
            " ORDER BY seq"
        )


@pytest.fixture(scope="module")
def planned(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Planned]:
    with running_pipeline(settings, tmp_path_factory.mktemp("requeue-plan"), "rp") as pipeline:
        scene = Scene(pipeline, "rp")
        scene.prepare({"n1": 4})
        # `hi` waits for the 4 GPUs the over-running `v` holds.
        scene.pend(scene.job("hi", 4, priority=100, min_available=4))
        scene.start(scene.job("v", 4, priority=50, annotations=OVERRUN), "n1")
        yield Planned(pipeline, scene, datetime.now(UTC))


def test_the_plan_shows_the_commit_and_writes_nothing(planned: Planned) -> None:
    scene = planned.scene
    victim, beneficiary = scene.uid("v"), scene.uid("hi")

    plan = planned.plan()
    table = planned.cli()

    assert (plan["state"], plan["node_pool"], plan["writes"]) == ("live", None, "nothing")
    ((decision),) = plan["decisions"]
    assert (decision["uid"], decision["outcome"], decision["reason"]) == (victim, "committed", None)
    assert (decision["beneficiaries"], decision["nominated_by"]) == (
        [beneficiary],
        ["expectedruntime"],
    )
    assert {(p["pod"], p["node"]) for p in decision["placements"]} == {
        (f"p{i}", scene.node("n1")) for i in range(4)
    }
    # The cooldown it would write: after the plan's instant (the default requeue-delay).
    assert datetime.fromisoformat(decision["requeue_not_before"]) > datetime.fromisoformat(
        plan["now"]
    )
    assert decision["recorded"] is True
    assert [n["uid"] for n in plan["nominated"]] == [victim]
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(victim))
    assert row.split()[1:4] == ["committed", "-", "expectedruntime"]
    assert beneficiary in row.split()
    assert "dry run: nothing written, no lock taken" in table.stdout.splitlines()[0]
    # One pool only: the scene's has the decision, the default pool has none.
    assert [d["uid"] for d in planned.plan("--node-pool", scene.pool)["decisions"]] == [victim]
    assert planned.plan("--node-pool", "default")["decisions"] == []
    assert planned.recorded() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--node-pool", "nowhere"), "--node-pool 'nowhere': no node, podgroup or configuration"),
        (("--at", "tomorrow"), "--at 'tomorrow': use RFC3339"),
        (("--at", "2999-01-01T00:00:00Z"), "is in the future"),
    ],
)
def test_bad_options_are_one_line(planned: Planned, args: tuple[str, ...], message: str) -> None:
    shown = planned.cli(*args)
    line = one_error_line(shown)
    assert shown.stdout == ""
    assert line.startswith("minruntime: error: ")
    assert message in line


def test_the_worker_decides_what_the_plan_said(planned: Planned) -> None:
    scene = planned.scene
    victim = scene.uid("v")
    (expected,) = planned.plan()["decisions"]

    planned.pipeline.start_worker()
    wait_for(planned.recorded, 60, f"the worker's decision\n{planned.pipeline.log_tail()}")
    (row,) = planned.recorded()

    assert tuple(row) == (
        expected["uid"],
        expected["outcome"],
        expected["reason"],
        expected["beneficiaries"],
    )
    promised = planned.pipeline.query(
        "SELECT beneficiary, node, gpu FROM minruntime_state.requeue_promises"
    )
    assert [(beneficiary, node, float(gpu)) for beneficiary, node, gpu in promised] == [
        (scene.uid("hi"), scene.node("n1"), 4.0)
    ]
    # Now the victim is in its cooldown; as of before the worker ran, the commit is still due.
    after = planned.plan()
    assert after["decisions"] == []
    assert {"uid": victim, "reason": "cooldown"} in after["not_nominated"]
    as_of = planned.plan("--at", ce.stamp(planned.before_worker))
    assert as_of["state"] == "as_of"
    assert [(d["uid"], d["outcome"]) for d in as_of["decisions"]] == [(victim, "committed")]
