"""`minruntime whatif` against the real processor: the prediction is what applying gives.

The CLI predicts (`--json`); then the same change is really made (`queues apply -f` the same
YAML, or the equivalent events produced by hand), the processor applies it, and the views,
read at the instant of the prediction, must equal the prediction: the changed rows as
predicted, every other row as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cloudevents import allocated, config, queue, submitted
from tests.conftest import run_cli
from tests.e2e.harness import Pipeline, one_error_line, wait_for

pytestmark = pytest.mark.stack

Rows = dict[str, tuple[Any, ...]]
# The runs started 12 minutes before the fixture: windows of 15m and more are open (for the
# few minutes this module takes), those of 11m and less are over.
STARTED_AGO = timedelta(minutes=12)
QUEUES_YAML = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: nlp}
spec: {parentQueue: research, reclaimMinRuntime: "45m"}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: production}
spec: {parentQueue: research, preemptMinRuntime: "20s"}
"""


def rfc3339(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


@pytest.fixture(scope="module")
def pipeline(pipeline: Pipeline) -> Pipeline:
    """The module's processor, with a tree and six podgroups running for STARTED_AGO."""
    start = rfc3339(datetime.now(UTC) - STARTED_AGO)
    pipeline.produce_events(
        "queues",
        [
            queue("research", reclaim="10m", time=start),
            queue("vision", "research", preempt="5m", time=start),
            queue("vision-a", "vision", reclaim="2m", time=start),
            queue("nlp", "research", reclaim="30m", time=start),
            queue("production", preempt="20s", reclaim="30s", time=start),
            config(time=start, defaultPreemptMinRuntime="15m"),
        ],
    )
    jobs = {
        "pg-vision": "vision",
        "pg-va": "vision-a",
        "pg-nlp": "nlp",
        "pg-prod": "production",
        "pg-r": "research",
        "pg-intern": "interns",  # not a queue: node-pool defaults
    }
    pipeline.produce_events(
        "podgroups",
        [
            event
            for uid, where in jobs.items()
            for event in (
                submitted(uid, where, ("p0", "p1"), priority=50, time=start),
                allocated(uid, ("p0", "p1"), start),
            )
        ],
    )
    wait_for(
        lambda: pipeline.scalar("SELECT count(*) FROM minruntime.preempt_protection") == len(jobs),
        60,
        f"{len(jobs)} running podgroups\n{pipeline.log_tail()}",
    )
    return pipeline


def whatif(pipeline: Pipeline, *args: str) -> dict[str, Any]:
    result = run_cli("whatif", *args, "--json", env=pipeline.env)
    assert result.returncode == 0, result.stderr
    prediction: dict[str, Any] = json.loads(result.stdout)
    return prediction


def protection(pipeline: Pipeline, at: str, reclaimer: str | None) -> Rows:
    """The view's answer at `at`: uid -> (min runtime s, from, until, protected, evictable)."""
    source = (
        "minruntime.preempt_protection(%(at)s)"
        if reclaimer is None
        else "minruntime.reclaim_protection(%(q)s, %(at)s)"
    )
    rows = pipeline.query(
        "SELECT uid, extract(epoch FROM min_runtime)::float, resolved_from, protected_until,"
        f" is_protected, evictable_pods FROM {source}",
        {"at": at, "q": reclaimer},
    )
    return {uid: tuple(rest) for uid, *rest in rows}


def predicted(before: Rows, prediction: dict[str, Any]) -> Rows:
    """The table before, with the predicted changes applied (checking their before values)."""
    after = dict(before)
    for change in prediction["changes"]:
        assert as_row(change["before"]) == before[change["uid"]]
        after[change["uid"]] = as_row(change["after"])
    return after


def as_row(values: dict[str, Any]) -> tuple[Any, ...]:
    until = values["protected_until"]
    return (
        values["min_runtime"],
        values["resolved_from"],
        None if until is None else datetime.fromisoformat(until),
        values["is_protected"],
        values["evictable_pods"],
    )


def event_count(pipeline: Pipeline) -> int:
    return int(pipeline.scalar("SELECT count(*) FROM minruntime.event_log"))


def holds(
    pipeline: Pipeline, prediction: dict[str, Any], make_change: Callable[[], Any], events: int
) -> None:
    """Make the change for real; once applied, the views at the prediction's instant agree."""
    at, reclaimer = prediction["at"], prediction["reclaimer_queue"]
    before = protection(pipeline, at, reclaimer)
    logged = event_count(pipeline)
    make_change()
    wait_for(
        lambda: event_count(pipeline) >= logged + events,
        60,
        f"the processor to apply the change\n{pipeline.log_tail()}",
    )
    assert protection(pipeline, at, reclaimer) == predicted(before, prediction)


def test_flags_predict_what_producing_the_change_gives(pipeline: Pipeline) -> None:
    prediction = whatif(pipeline, "--queue", "vision", "--preempt-min-runtime", "1h")
    assert [(e["type"], e["data"]) for e in prediction["events"]] == [
        (
            "queue.upserted",
            {
                "name": "vision",
                "parentQueue": "research",
                "preemptMinRuntime": "1h",
                "reclaimMinRuntime": None,
            },
        )
    ]
    assert [(c["uid"], c["effect"]) for c in prediction["changes"]] == [
        ("pg-va", "protected_now"),
        ("pg-vision", "protected_now"),
    ]
    # The real change, written by hand: a queue.upserted states the whole spec.
    real = [queue("vision", "research", preempt="1h")]
    holds(pipeline, prediction, lambda: pipeline.produce_events("queues", real), 1)


def test_a_queue_yaml_predicts_what_queues_apply_gives(pipeline: Pipeline, tmp_path: Path) -> None:
    manifest = tmp_path / "queues.yaml"
    manifest.write_text(QUEUES_YAML)
    prediction = whatif(pipeline, "-f", str(manifest), "--reclaimer-queue", "vision")
    assert prediction["rule"] == "reclaim"
    assert [e["subject"] for e in prediction["events"]] == ["nlp", "production"]
    # vision reclaims: from nlp (sibling) now 45m; production joins research's tree: its leaf
    # value is unset, so research's 10m applies instead of its old root's 30s.
    assert {c["uid"]: c["after"]["min_runtime"] for c in prediction["changes"]} == {
        "pg-nlp": 45 * 60.0,
        "pg-prod": 10 * 60.0,
    }

    def apply() -> None:
        result = run_cli("queues", "apply", "-f", str(manifest), env=pipeline.env)
        assert result.returncode == 0, result.stderr

    holds(pipeline, prediction, apply, 2)


def test_config_flags_predict_what_producing_the_config_gives(pipeline: Pipeline) -> None:
    prediction = whatif(
        pipeline,
        "--reclaim-resolve-method",
        "queue",
        "--default-reclaim-min-runtime",
        "11m",
        "--reclaimer-queue",
        "production",
    )
    (event,) = prediction["events"]
    assert event["data"] == {
        "nodePool": "default",
        "defaultPreemptMinRuntime": "15m",  # kept
        "defaultReclaimMinRuntime": "11m",
        "reclaimResolveMethod": "queue",
        "defaultRequeueDelay": "5m",
    }
    # production reclaims from vision-a (a cousin): lca → vision's side, unset → research's
    # 10m; queue → vision-a's own 2m. interns is no queue: the new default.
    assert {c["uid"]: c["after"]["min_runtime"] for c in prediction["changes"]} == {
        "pg-va": 2 * 60.0,
        "pg-intern": 11 * 60.0,
    }
    real = [
        config(
            defaultPreemptMinRuntime="15m",
            defaultReclaimMinRuntime="11m",
            reclaimResolveMethod="queue",
        )
    ]
    holds(pipeline, prediction, lambda: pipeline.produce_events("queues", real), 1)


def test_errors_are_one_line_and_nothing_is_written(pipeline: Pipeline) -> None:
    logged = event_count(pipeline)
    schemas = pipeline.query("SELECT nspname FROM pg_namespace ORDER BY 1")
    for args, expected in (
        (
            ["--queue", "vision", "--preempt-min-runtime", "5"],
            "minruntime: error: --preempt-min-runtime '5': invalid duration '5'",
        ),
        (
            ["--queue", "research", "--parent", "vision"],
            "minruntime: error: --queue research: the service would reject this change"
            " (queue_cycle): ",
        ),
    ):
        result = run_cli("whatif", *args, env=pipeline.env)
        assert one_error_line(result).startswith(expected)
        assert result.stdout == ""
    text = run_cli("whatif", "--delete-queue", "vision", env=pipeline.env)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].startswith("The change: 1 event")
    assert text.stdout.splitlines()[-1] == (
        "2 of 6 running podgroups change; 0 become unprotected now, 0 become protected now."
    )
    assert event_count(pipeline) == logged
    assert pipeline.query("SELECT nspname FROM pg_namespace ORDER BY 1") == schemas
