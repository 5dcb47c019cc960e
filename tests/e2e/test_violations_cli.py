"""Runs and `minruntime violations` through Kafka, the real processor and PostgreSQL.

A pipeline gets the design tree (SEMANTICS.md §4) and runs that end in every way; the installed
CLI lists the violations as JSON and as a table, filters them, refuses bad options in one line,
and the audit picture marks the violation; the processor's metrics count the work lost. The
harness proves at the end that `replay --verify` rebuilds `run_log` equal.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.conftest import free_ports
from tests.e2e.harness import PipelineCli, one_error_line, running_pipeline, wait_for

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Ended(PipelineCli):
    metrics_port: int

    def cli_json(self, *args: str) -> Any:
        """The command's ``--json`` output, once it has succeeded."""
        shown = self.cli(*args, "--json")
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)


def ended(uid: str, queue: str, seconds: float, reason: str) -> list[dict[str, Any]]:
    """A 2-GPU podgroup of ``queue`` that runs from T0 for ``seconds`` and ends for ``reason``."""
    release = ce.released(uid, time=ce.at(seconds), reason="completed")
    release["data"]["reason"] = reason
    return [
        ce.submitted(uid, queue, ("p0", "p1"), priority=50),
        ce.allocated(uid, ("p0", "p1"), ce.at(0)),
        release,
    ]


@contextmanager
def ended_runs(
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    podgroup_events: list[dict[str, Any]],
    count: int,
) -> Iterator[Ended]:
    """A pipeline named ``name`` with the design tree (reclaim default 120s) and
    ``podgroup_events``, in a fresh directory, once its ``count`` runs have ended."""
    workdir = tmp_path_factory.mktemp(name)
    port = free_ports()
    with running_pipeline(settings, workdir, name, processor_metrics_port=str(port)) as pipeline:
        pipeline.produce_events(
            "queues", [*ce.design_tree(), ce.config(defaultReclaimMinRuntime="120s")]
        )
        wait_for(
            lambda: pipeline.scalar("SELECT count(*) FROM minruntime.queues") == 7,
            60,
            "the queue tree",
        )
        pipeline.produce_events("podgroups", podgroup_events)
        wait_for(
            lambda: pipeline.scalar("SELECT count(*) FROM minruntime.runs") == count,
            60,
            f"{count} runs",
        )
        yield Ended(pipeline, port)


def runs_fixture(name: str, podgroup_events: list[dict[str, Any]], count: int) -> Any:
    """A module's ``runs`` fixture: ``ended_runs`` of these events, once for the module."""

    @pytest.fixture(scope="module")
    def runs(
        stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[Ended]:
        with ended_runs(settings, tmp_path_factory, name, podgroup_events, count) as ended_:
            yield ended_

    return runs


def metric_samples(port: int) -> dict[str, float]:
    """The processor's metrics, sample by sample (name with labels -> value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        text = response.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


EVENTS = [
    *ended("def", "leaf3", 50, "evicted"),  # inside every window: definite
    *ended("pos", "leaf1", 100, "preempted"),  # inside some: possible
    *ended("late", "leaf3", 900, "evicted"),  # after every window
    *ended("done", "leaf3", 50, "completed"),  # inside, but not evicted
]
runs = runs_fixture("vi", EVENTS, 4)


def test_the_json_lists_each_violation_with_its_rules(runs: Ended) -> None:
    report = runs.cli_json("violations")
    assert {key: report[key] for key in ("evicted_runs", "violations", "definite", "possible")} == {
        "evicted_runs": 3,
        "violations": 2,
        "definite": 1,
        "possible": 1,
    }
    first, second = report["rows"]
    assert (first["uid"], first["verdict"], first["ended_by"], first["queue"]) == (
        "def",
        "definite",
        "evicted",
        "leaf3",
    )
    assert (first["ran"], first["cut_short"], first["gpus"], first["gpu_seconds"]) == (
        50,
        550,
        2,
        100,
    )
    assert [
        (r["reclaimers"], r["lca"], r["min_runtime"], r["protected"]) for r in first["rules"]
    ] == [
        ("own-queue", None, 600, True),
        ("below", "A", 600, True),
        ("below", "B", 60, True),
        ("below", "D", 60, True),
        ("unknown", None, 120, True),
    ]
    assert (second["uid"], second["verdict"]) == ("pos", "possible")
    # leaf1's own 0s protects nothing: a reclaimer whose LCA with it is C could have taken it.
    assert [r["protected"] for r in second["rules"]] == [True, True, True, False, True]
    # Where in the log each run ended (the podgroups' partitions interleave in any order).
    assert isinstance(first["seq"], int)
    assert first["seq"] != second["seq"]


def test_the_table_says_the_same_for_people(runs: Ended) -> None:
    shown = runs.cli("violations")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == (
        "2 protection violations among 3 runs ended by an eviction: 1 definite, 1 possible"
    )
    assert lines[1].split()[:4] == ["ENDED", "UID", "QUEUE", "ENDED"]
    (definite,) = [line for line in lines if " def " in line]
    assert "definite" in definite
    assert "preempt: 10m (queue B), cut 9m10s short" in definite
    assert any("reclaim via LCA B: 1m (queue D), cut 10s short" in line for line in lines)
    assert not any(" late " in line or " done " in line for line in lines)


def test_filters_and_one_line_errors(runs: Ended) -> None:
    leaf1 = json.loads(runs.cli("violations", "--queue", "leaf1", "--json").stdout)
    assert [row["uid"] for row in leaf1["rows"]] == ["pos"]
    since = json.loads(runs.cli("violations", "--since", ce.at(60), "--json").stdout)
    assert [row["uid"] for row in since["rows"]] == ["pos"]
    for args, phrase in (
        (("--since", "yesterday"), "--since 'yesterday'"),
        (("--queue", "nowhere"), "--queue 'nowhere'"),
        (("--queue", ""), "--queue ''"),
    ):
        refused = runs.cli("violations", *args)
        assert phrase in one_error_line(refused)
        assert refused.stdout == ""


def test_the_audit_picture_marks_the_violation(runs: Ended, tmp_path: Path) -> None:
    picture = tmp_path / "def.svg"
    drawn = runs.cli("audit", "def", "--plot", str(picture))
    assert drawn.returncode == 0, drawn.stderr
    assert "violation (definite), cut 9m10s short" in picture.read_text()


def test_the_processor_counts_the_work_lost(runs: Ended) -> None:
    samples = metric_samples(runs.metrics_port)
    assert samples['minruntime_run_seconds_lost_count{ended_by="evicted"}'] == 2
    assert samples['minruntime_run_seconds_lost_sum{ended_by="preempted"}'] == 100
    assert samples['minruntime_gpu_seconds_lost_total{queue="leaf3"}'] == 1900
    assert samples['minruntime_gpu_seconds_lost_total{queue="leaf1"}'] == 200
    assert samples['minruntime_protection_violations_total{verdict="definite"}'] == 1
    assert samples['minruntime_protection_violations_total{verdict="possible"}'] == 1
