"""`minruntime simulate` through Kafka, the real processor and PostgreSQL, as an operator runs it.

A pipeline gets the design tree and runs that end in several ways, and one record the processor
dead-letters; the installed CLI simulates a Queue YAML over the log as JSON, as a table and as
an HTML page, and refuses bad input in one line. The harness proves at the end that
`replay --verify` still finds the live state equal to the log (nothing was written).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.e2e.harness import PipelineCli, one_error_line, running_pipeline, wait_for
from tests.e2e.test_violations_cli import ended

pytestmark = pytest.mark.stack

SINCE = "2026-11-21T10:00:00Z"
UNTIL = "2026-11-21T12:00:00Z"
# leaf3 (under D) protected 2h against its own queue: "late", evicted at 15m, becomes a
# possible violation; "def" stays definite.
LEAF3_2H = """apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: leaf3
spec:
  parentQueue: D
  preemptMinRuntime: "2h"
"""


@dataclass(frozen=True)
class Simulated(PipelineCli):
    columns = 300

    workdir: Path

    def change(self, name: str, text: str) -> str:
        path = self.workdir / name
        path.write_text(text)
        return str(path)


@pytest.fixture(scope="module")
def log(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Simulated]:
    workdir = tmp_path_factory.mktemp("simulate")
    with running_pipeline(settings, workdir, "si") as pipeline:
        pipeline.produce_events(
            "queues", [*ce.design_tree(), ce.config(defaultReclaimMinRuntime="120s")]
        )
        pipeline.produce("queues", [(b"bad", b'{"not": "an event"}')])
        wait_for(
            lambda: pipeline.scalar("SELECT count(*) FROM minruntime.queues") == 7,
            60,
            "the queue tree",
        )
        pipeline.produce_events(
            "podgroups",
            [
                *ended("def", "leaf3", 50, "evicted"),
                *ended("late", "leaf3", 900, "evicted"),
                *ended("done", "leaf3", 50, "completed"),
            ],
        )
        wait_for(
            lambda: pipeline.scalar("SELECT count(*) FROM minruntime.runs") == 3,
            60,
            "three runs",
        )
        yield Simulated(pipeline, workdir)


def test_a_queue_yaml_over_the_log_as_json(log: Simulated) -> None:
    change = log.change("leaf3.yaml", LEAF3_2H)

    done = log.cli("simulate", "--since", SINCE, "--until", UNTIL, "-f", change, "--json")

    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    leaf3 = data["queues"]["leaf3"]
    assert leaf3["violations"]["evicted_runs"] == 2
    assert leaf3["violations"]["before"] == {"definite": 1, "possible": 0}
    assert leaf3["violations"]["new"] == {"definite": 0, "possible": 1}
    # Only "late" outlived a recorded window: the others were protected all their run anyway.
    assert (leaf3["protection"]["runs"], leaf3["protection"]["longer"]) == (3, 1)
    assert data["change"] == [
        {
            "origin": f'{change} document 1 (Queue "leaf3")',
            "type": "queue.upserted",
            "subject": "leaf3",
        }
    ]
    assert data["confidence"]["violations"]["kind"] == "exact"
    assert data["log"]["missing"] is None


def test_the_table_and_the_page(log: Simulated) -> None:
    change = log.change("leaf3.yaml", LEAF3_2H)
    page = log.workdir / "report.html"

    done = log.cli(
        "simulate", "--since", SINCE, "--until", UNTIL, "-f", change, "--html", str(page)
    )

    assert done.returncode == 0, done.stderr
    assert "nothing written" in done.stdout
    assert "leaf3" in done.stdout
    assert "violations: exact" in done.stdout
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert 'data-figure="queues.leaf3.violations.new.possible">1<' in text


def test_dead_letters_of_the_window_are_counted(log: Simulated) -> None:
    change = log.change("leaf3.yaml", LEAF3_2H)

    done = log.cli("simulate", "--since", SINCE, "-f", change, "--json")

    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["log"]["dead_letters"] == 1
    assert any("dead-lettered" in note for note in data["notes"])


def test_bad_input_is_one_line(log: Simulated) -> None:
    broken = log.change("broken.yaml", LEAF3_2H.replace('"2h"', '"2h-30m"'))
    # The log's own leaf3 (a hand-written event: no resources, unmanaged). A Queue YAML without
    # spec.resources would not be the same: it carries KAI's zero quota and limit.
    same = log.change(
        "same.jsonl",
        '{"type": "queue.upserted", "data": {"name": "leaf3", "parentQueue": "D"}}\n',
    )

    refused = log.cli("simulate", "--since", SINCE, "--until", UNTIL, "-f", broken)
    # The file, the document and the field, as `apply` names them.
    line = one_error_line(refused)
    assert 'broken.yaml document 1 (Queue "leaf3"): spec.preemptMinRuntime' in line

    empty = log.cli(
        "simulate", "--since", "2020-01-01T00:00:00Z", "--until", "2020-01-02T00:00:00Z", "-f", same
    )
    assert "no event in the window" in one_error_line(empty)

    earlier = log.cli("simulate", "--since", "2026-11-20T10:00:00Z", "--until", UNTIL, "-f", same)
    assert earlier.returncode == 0, earlier.stderr
    assert "before the log's first entry" in earlier.stdout
    assert "the change does nothing" in earlier.stdout
