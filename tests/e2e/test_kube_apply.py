"""`minruntime queues apply` and `minruntime config apply`: Kubernetes YAML in, SQL views out."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_cli
from tests.e2e.harness import Pipeline, wait_for

pytestmark = pytest.mark.stack

EXAMPLES = ROOT / "schemas" / "examples"


def queue_rows(pipeline: Pipeline) -> dict[str, tuple[Any, ...]]:
    rows = pipeline.query(
        "SELECT name, parent, preempt_min_runtime, reclaim_min_runtime FROM minruntime.queues"
    )
    return {name: tuple(rest) for name, *rest in rows}


def config_row(pipeline: Pipeline, node_pool: str) -> tuple[Any, ...] | None:
    rows = pipeline.query(
        "SELECT default_preempt_min_runtime, default_reclaim_min_runtime,"
        " reclaim_resolve_method, default_requeue_delay"
        " FROM minruntime.node_pool_configs WHERE node_pool = %s",
        (node_pool,),
    )
    return tuple(rows[0]) if rows else None


def minutes(value: float) -> timedelta:
    return timedelta(minutes=value)


def test_the_seed_queue_and_a_tree_reach_the_queues_view(pipeline: Pipeline) -> None:
    result = run_cli(
        "queues",
        "apply",
        "-f",
        str(EXAMPLES / "queues.tree.yaml"),
        "-f",
        str(EXAMPLES / "queue.production.yaml"),
        env=pipeline.env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"sent 5 queue.upserted event(s) to {pipeline.topics['queues']}:"
        " research, vision, nlp, nlp-interactive, production"
    ]
    expected = {
        "production": (None, timedelta(seconds=20), timedelta(seconds=30)),
        "research": (None, None, minutes(10)),
        "vision": ("research", minutes(5), None),
        "nlp": ("research", None, minutes(30)),
        "nlp-interactive": ("nlp", timedelta(0), None),
    }
    wait_for(
        lambda: all(queue_rows(pipeline).get(name) == row for name, row in expected.items()),
        60,
        f"the applied queues in minruntime.queues\n{pipeline.log_tail()}",
    )
    sources = pipeline.query(
        "SELECT DISTINCT source FROM minruntime.event_log WHERE type = 'queue.upserted'"
    )
    assert sources == [("minruntime-cli",)]


def test_reapplying_a_changed_queue_updates_it(pipeline: Pipeline, tmp_path: Path) -> None:
    changed = tmp_path / "production.yaml"
    changed.write_text(
        (EXAMPLES / "queue.production.yaml").read_text().replace('"20s"', '"2m"')
        + "  parentQueue: research\n"
    )
    result = run_cli("queues", "apply", "-f", str(tmp_path), env=pipeline.env)
    assert result.returncode == 0, result.stderr
    wait_for(
        lambda: (
            queue_rows(pipeline).get("production")
            == ("research", minutes(2), timedelta(seconds=30))
        ),
        60,
        f"the changed queue\n{pipeline.log_tail()}",
    )


def test_the_seed_scheduler_config_and_the_config_map(pipeline: Pipeline) -> None:
    seed = run_cli(
        "config", "apply", "-f", str(EXAMPLES / "scheduler-config.yaml"), env=pipeline.env
    )
    assert seed.returncode == 0, seed.stderr
    assert seed.stdout.splitlines() == [
        f"sent config.updated for node pool default to {pipeline.topics['queues']}:"
        " defaultPreemptMinRuntime=10m, defaultReclaimMinRuntime=10m,"
        " reclaimResolveMethod=lca, defaultRequeueDelay=5m"
    ]
    shipped = run_cli(
        "config",
        "apply",
        "-f",
        str(EXAMPLES / "scheduler-config.configmap.yaml"),
        "--node-pool",
        "a100",
        env=pipeline.env,
    )
    assert shipped.returncode == 0, shipped.stderr
    wait_for(
        lambda: (
            config_row(pipeline, "default") == (minutes(10), minutes(10), "lca", minutes(5))
            and config_row(pipeline, "a100") == (minutes(5), minutes(15), "queue", minutes(5))
        ),
        60,
        f"both node pools in minruntime.node_pool_configs\n{pipeline.log_tail()}",
    )


def test_one_bad_document_sends_nothing(pipeline: Pipeline, tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata:\n  name: sent-too-early\n"
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"
    )
    refused = run_cli("queues", "apply", "-f", str(mixed), env=pipeline.env)
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f'minruntime: error: {mixed} document 2 (Deployment "web"): kind: a Deployment (apps/v1)'
        " is not accepted here: `minruntime queues apply` accepts scheduling.run.ai/v2 Queue"
        " objects (or a v1 List of them)"
    ]
    no_plugin = tmp_path / "config.yaml"
    no_plugin.write_text("tiers:\n- plugins:\n  - name: proportion\n")
    refused = run_cli("config", "apply", "-f", str(no_plugin), env=pipeline.env)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"minruntime: error: {no_plugin} document 1: tiers: no minruntime plugin (plugins:"
        " proportion); add `- name: minruntime` with its arguments to a tier's plugins"
    ]
    # kai.queues has one partition: once a later queue is applied, an earlier one would be too.
    marker = tmp_path / "marker.yaml"
    marker.write_text(mixed.read_text().split("---")[0].replace("sent-too-early", "marker"))
    assert run_cli("queues", "apply", "-f", str(marker), env=pipeline.env).returncode == 0
    wait_for(lambda: "marker" in queue_rows(pipeline), 60, f"marker\n{pipeline.log_tail()}")
    assert "sent-too-early" not in queue_rows(pipeline)
