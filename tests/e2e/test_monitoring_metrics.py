"""The alerts and the dashboard read what the service really exports and stores.

The real processor, requeue worker and cluster bridge run on the local stack (a private
database and topics, the bridge on the real API server with a Lease of its own) and are
scraped (the bridge checks drift every second here); `kube diff --metrics-file` writes its
textfile too. Every metric name of the rules' and the dashboard's PromQL must be declared by
the running components with its `# HELP` and `# TYPE` (a
labelled counter that has counted nothing has no sample yet, but is declared). The signals of
the leadership and readiness alerts are checked with their values. Every SQL query of the
dashboard runs as `minruntime_reader`, and every SQL block of docs/operations.md as the runtime
role, against the running service's database.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from minruntime.settings import READER_ROLE, Settings, with_role
from minruntime_dev.stack import StackStatus
from tests.conftest import free_ports, run_cli
from tests.e2e.harness import Pipeline, Worker, probe, wait_for
from tests.e2e.kubeloop import KubeProcess, KubeScene, kube_scene
from tests.monitoring import RUNBOOK, alerts, code_blocks, families, family_of, metric_names
from tests.monitoring import targets as dashboard_targets

pytestmark = pytest.mark.stack

COMPONENTS = ("processor", "requeue-worker", "kube-bridge", "kube-evictor")


@dataclass
class Service:
    """The running processes, their metrics ports, and kube diff's textfile."""

    pipeline: Pipeline
    worker: Worker
    bridge: KubeProcess
    evictor: KubeProcess
    ports: dict[str, int]
    textfile: Path

    def page(self, component: str) -> str:
        status, body = probe(self.ports[component], "/metrics")
        assert status == 200, body
        return body


def sample(page: str, name: str, **labels: str) -> float | None:
    """The value of the series ``name{labels}`` of a scrape, None when it has none."""
    for family in text_string_to_metric_families(page):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return None


@pytest.fixture(scope="module")
def service(
    kube_stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    port = free_ports(len(COMPONENTS))
    ports = dict(zip(COMPONENTS, range(port, port + len(COMPONENTS)), strict=True))
    with kube_scene(
        KubeScene,
        kube_stack,
        settings,
        tmp_path_factory,
        "mon",
        "mon",
        processor_metrics_port=str(ports["processor"]),
        requeue_interval_seconds="1",
    ) as scene:
        pipeline, namespace = scene.pipeline, scene.cluster.namespace
        bridge = scene.kube(
            "bridge",
            MINRUNTIME_KUBE_BRIDGE_METRICS_PORT=str(ports["kube-bridge"]),
            MINRUNTIME_KUBE_DRIFT_SECONDS="1",
        )
        # The evictor exports what the requeue-abandoned alert reads.
        evictor = scene.kube(
            "evictor", MINRUNTIME_KUBE_EVICTOR_METRICS_PORT=str(ports["kube-evictor"])
        )
        try:
            worker = pipeline.start_worker(
                "w", env={"MINRUNTIME_WORKER_METRICS_PORT": str(ports["requeue-worker"])}
            )
            bridge.start()
            evictor.start()
            for component in COMPONENTS:
                wait_for(_ready(ports[component]), 120, f"the {component} to be ready")
            textfile = pipeline.workdir / "minruntime_drift.prom"
            diff = ("kube", "diff", "--namespace", namespace, "--metrics-file", str(textfile))
            done = run_cli(*diff, env=bridge.env)
            assert done.returncode == 0, done.stdout + done.stderr
            yield Service(pipeline, worker, bridge, evictor, ports, textfile)
        finally:
            evictor.stop()
            bridge.stop()


def _ready(port: int) -> Callable[[], bool]:
    return lambda: probe(port, "/readyz")[0] == 200


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(service: Service) -> None:
    """By the running components alone, as a chart install runs them: the drift gauges come
    from the active bridge's own check (no `kube diff` textfile needed)."""
    wait_for(
        lambda: "minruntime_kube_drift_checked_timestamp_seconds " in service.page("kube-bridge"),
        120,
        "the active bridge's first drift check",
    )
    pages = {component: service.page(component) for component in COMPONENTS}
    declared = {}
    for page in pages.values():
        declared.update(families(page))
    expressions = [(rule["alert"], rule["expr"]) for rule in alerts()]
    expressions += [(target.panel, target.expr) for target in dashboard_targets() if target.expr]
    assert len(expressions) > 30
    for where, expr in expressions:
        for name in metric_names(expr):
            family = family_of(name, declared)
            assert family is not None, f"{where}: {name} is not exported ({expr})"
            assert declared[family].help, f"{where}: {family} has no # HELP"
            assert declared[family].type, f"{where}: {family} has no # TYPE"


def test_the_leadership_and_readiness_signals_are_true(service: Service) -> None:
    def active() -> bool:
        worker = sample(service.page("requeue-worker"), "minruntime_requeue_worker_active")
        bridge = sample(service.page("kube-bridge"), "minruntime_kube_bridge_active")
        return worker == 1.0 and bridge == 1.0

    wait_for(active, 60, "the worker to hold its lock and the bridge its Lease")
    for component in COMPONENTS:
        page = service.page(component)
        assert sample(page, "minruntime_ready", component=component) == 1.0, component
    processor = service.page("processor")
    for check in ("database", "kafka", "batches", "started", "topics"):
        value = sample(processor, "minruntime_readiness_check", component="processor", check=check)
        assert value == 1.0, check
    worker = service.page("requeue-worker")
    for check in ("database", "leader loop"):
        value = sample(
            worker, "minruntime_readiness_check", component="requeue-worker", check=check
        )
        assert value == 1.0, check
    assert "minruntime_kube_drift_checked_timestamp_seconds " in service.textfile.read_text()


def test_the_dashboards_sql_runs_as_the_reader(service: Service, settings: Settings) -> None:
    url = with_role(service.pipeline.database_url, READER_ROLE, settings.passfile)
    queries = [target for target in dashboard_targets() if target.sql]
    assert len(queries) >= 4
    with psycopg.connect(url, autocommit=True) as conn:
        for target in queries:
            sql = re.sub(
                r"\$__timeFilter\((\w+)\)",
                r"\1 BETWEEN now() - interval '6 hours' AND now()",
                target.sql,
            )
            assert "$" not in sql, f"{target.panel}: a Grafana macro the test does not know"
            conn.execute(sql).fetchall()  # type: ignore[arg-type]


def test_the_runbooks_sql_runs_and_finds_the_active_worker(service: Service) -> None:
    statements = [
        statement.strip()
        for block in code_blocks(RUNBOOK.read_text(), "sql")
        for statement in block.split(";")
        if statement.strip()
    ]
    assert len(statements) >= 6
    for statement in statements:
        rows = service.pipeline.query(statement)
        if "pg_locks" in statement:
            # Exactly the one session of the active replica holds the leader lock.
            assert len(rows) == 1, rows
            assert rows[0][1] == "minruntime", rows
