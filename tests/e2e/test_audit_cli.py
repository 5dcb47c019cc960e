"""`minruntime audit UID` as a user runs it, on the log a real processor and worker wrote.

One pipeline (processor + one requeue worker) requeues an over-running job for a pending
higher-priority gang; the cluster then evicts it. The installed CLI tells that story as a
table, as JSON and as an SVG timeline, and refuses an unknown uid in one line.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from minruntime.core import EXPECTED_RUNTIME_PLUGIN
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.e2e.harness import PipelineCli, running_pipeline
from tests.e2e.test_requeue_worker import OVERRUN, Scene, wait_decisions

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Requeued(PipelineCli):
    """The pipeline, the requeued job and the gang it made room for."""

    command = ("audit",)
    # A wide "terminal": every table cell on one line, so phrases can be searched.
    columns = 500

    victim: str
    contender: str

    def audit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli(*args)


@pytest.fixture(scope="module")
def requeued(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Requeued]:
    workdir = tmp_path_factory.mktemp("audit")
    with running_pipeline(settings, workdir, "au", requeue_interval_seconds="1") as pipeline:
        pipeline.start_worker("w")
        scene = Scene(pipeline, "au")
        scene.prepare({"n1": 8})
        contender = scene.pend(scene.job("hi", 4, priority=100, min_available=4))
        victim = scene.start(scene.job("v", 8, priority=50, annotations=OVERRUN), "n1")
        assert wait_decisions(pipeline, victim)[0][0] == "committed"
        # The cluster carries the requeue out.
        released = ce.released(victim, time=ce.stamp(datetime.now(UTC)), reason="completed")
        released["data"]["reason"] = "evicted"
        scene.send(released)
        scene.wait_status(victim, "pending")  # evicted: waits to be scheduled again
        yield Requeued(pipeline, victim, contender)


def test_the_table_tells_the_requeue_and_why(requeued: Requeued) -> None:
    shown = requeued.audit(requeued.victim)

    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"podgroup {requeued.victim}" in out
    for event in ("podgroup.submitted", "podgroup.allocated", "requeue.committed"):
        assert event in out, event
    # The commit's reason: who nominated it, and the gang that fits once it is gone.
    assert f"requeue committed (nominated by {EXPECTED_RUNTIME_PLUGIN})" in out
    assert f"{requeued.contender} fit once it is gone" in out
    assert "cooldown until" in out
    assert "requeued" in out  # how the run ended (Runs table)


def test_json_is_the_same_story_as_data(requeued: Requeued) -> None:
    shown = requeued.audit(requeued.victim, "--json")

    assert shown.returncode == 0, shown.stderr
    story: dict[str, Any] = json.loads(shown.stdout)
    assert story["uid"] == requeued.victim
    types = [row["type"] for row in story["rows"]]
    assert types == [
        "podgroup.submitted",
        "podgroup.allocated",
        "requeue.committed",
        "podgroup.released",
    ]
    commit = story["rows"][2]["decision"]
    assert (commit["outcome"], commit["beneficiaries"], commit["nominated_by"]) == (
        "committed",
        [requeued.contender],
        [EXPECTED_RUNTIME_PLUGIN],
    )
    decided_at = datetime.fromisoformat(story["rows"][2]["time"])
    assert datetime.fromisoformat(commit["requeue_not_before"]) > decided_at
    [run] = story["runs"]
    assert run["ended_by"] == "requeued"
    assert run["protected_until"] == run["windows"][-1]["protected_until"]


def test_plot_writes_an_svg_timeline(requeued: Requeued, tmp_path: Path) -> None:
    path = tmp_path / "story.svg"

    shown = requeued.audit(requeued.victim, "--plot", str(path))

    assert shown.returncode == 0, shown.stderr
    assert f"timeline written to {path}" in shown.stdout
    text = " ".join(ET.parse(path).getroot().itertext())
    assert requeued.victim in text
    assert f"committed for {requeued.contender}" in text


def test_an_unknown_uid_or_a_bad_picture_name_is_one_line(requeued: Requeued) -> None:
    unknown = requeued.audit("no-such-podgroup")
    bad_suffix = requeued.audit(requeued.victim, "--plot", "story.pdf")

    assert unknown.returncode != 0
    assert unknown.stdout == ""
    assert unknown.stderr == (
        "minruntime: error: no podgroup with uid 'no-such-podgroup' in the event log\n"
    )
    assert bad_suffix.returncode != 0
    assert bad_suffix.stderr.count("\n") == 1
    assert ".png or .svg" in bad_suffix.stderr
