"""The Helm chart deploy/helm/minruntime/: `helm lint`; with its default values it renders the
objects of deploy/kubernetes/ (the same workloads, environment and RBAC, so the two cannot
drift); every value reaches the manifests; every rendered object passes a server-side dry run
on the real API server of `stack up --kube`; the PrometheusRule carries the rule file."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.e2e.helmchart import (
    CHART,
    EVERYTHING,
    OPERATOR,
    RBAC_KINDS,
    RULES,
    Helm,
    by_kind,
    environment,
    is_the_default,
    rbac,
    rule_groups,
    without_key,
)
from tests.e2e.kubeapi import admin_client, apply, deploy_manifests, ensure_namespace
from tests.manifests import SETTINGS, assert_a_real_minruntime_command, setting_names, workloads

pytestmark = pytest.mark.stack

# The chart leaves these to the installer: `helm install --create-namespace`, and the database
# Secret, which it only names (no password is ever in its values).
NOT_IN_THE_CHART = {"Namespace", "Secret"}
MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule"}
DRY_RUN_NAMESPACE = "minruntime-helm"
EVERYTHING_NAMESPACE = "minruntime-helm-all"
INSTANCE = "app.kubernetes.io/instance"


@pytest.fixture(scope="module")
def helm(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm.build(settings, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def defaults(helm: Helm) -> list[dict[str, Any]]:
    return helm.template()


@pytest.fixture(scope="module")
def everything(helm: Helm) -> list[dict[str, Any]]:
    return helm.template("-f", EVERYTHING, *OPERATOR, release="rel", namespace=EVERYTHING_NAMESPACE)


def _identity(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects}


def test_helm_lint_passes_with_the_defaults_and_with_every_value(helm: Helm) -> None:
    every_value: list[str | Path] = ["-f", EVERYTHING]
    for values in ([], every_value):
        linted = helm.run("lint", "--strict", CHART, *values)
        assert linted.returncode == 0, linted.stdout + linted.stderr
        assert "0 chart(s) failed" in linted.stdout


def test_the_defaults_render_the_objects_of_the_kustomization(
    defaults: list[dict[str, Any]],
) -> None:
    kustomized = [o for o in deploy_manifests() if o["kind"] not in NOT_IN_THE_CHART]
    assert _identity(defaults) == _identity(kustomized)
    assert not {o["kind"] for o in defaults} & MONITORING_KINDS, "no Prometheus Operator here"


def test_each_workload_of_the_defaults_is_the_kustomization_one(
    defaults: list[dict[str, Any]],
) -> None:
    """Replicas, strategy, pod spec (probes, ports, volumes, resources, security, account)
    and every variable each container gets; the chart may add only variables at their
    defaults and its release label."""
    kustomized = deploy_manifests()
    charted = by_kind(defaults, "Deployment", "Job")
    for name, wanted in by_kind(kustomized, "Deployment", "Job").items():
        got = charted[name]
        for field in ("replicas", "strategy", "backoffLimit", "ttlSecondsAfterFinished"):
            assert got["spec"].get(field) == wanted["spec"].get(field), (name, field)
        selector = got["spec"].get("selector", {}).get("matchLabels", {})
        assert selector.items() >= wanted["spec"].get("selector", {}).get("matchLabels", {}).items()
        labels = got["spec"]["template"]["metadata"]["labels"]
        assert labels.items() >= wanted["spec"]["template"]["metadata"]["labels"].items()

        pods = [o["spec"]["template"]["spec"] for o in (got, wanted)]
        (got_container,), (wanted_container,) = (pod["containers"] for pod in pods)
        got_env = environment(defaults, got_container)
        wanted_env = environment(kustomized, wanted_container)
        assert {k: got_env.get(k) for k in wanted_env} == wanted_env, name
        extra = {k: v for k, v in got_env.items() if k not in wanted_env}
        assert all(is_the_default(k, v) for k, v in extra.items()), (name, extra)

        got_pod, wanted_pod = (
            without_key(without_key(without_key(pod, "env"), "envFrom"), INSTANCE) for pod in pods
        )
        assert got_pod == wanted_pod, name


def test_the_rbac_is_the_kustomization_rbac(defaults: list[dict[str, Any]]) -> None:
    charted = rbac(defaults)
    assert charted == rbac(deploy_manifests())
    assert {kind for kind, _, _ in charted} == set(RBAC_KINDS)


def test_every_value_reaches_the_manifests(everything: list[dict[str, Any]]) -> None:
    pods = workloads(everything)
    deployments = by_kind(everything, "Deployment")
    replicas = {name: d["spec"]["replicas"] for name, d in deployments.items()}
    assert replicas == {
        "gpu-minrt-processor": 3,
        "gpu-minrt-requeue-worker": 3,
        "gpu-minrt-snapshotter": 1,
        "gpu-minrt-kube-bridge": 3,
        "gpu-minrt-kube-evictor": 2,
    }
    containers = {name: pod["containers"][0] for name, pod in pods.items()}
    assert {c["image"] for c in containers.values()} == {"registry.example.com/ml/minruntime:0.1.0"}
    assert containers["gpu-minrt-processor"]["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}
    assert containers["gpu-minrt-migrate"]["resources"]["requests"]["memory"] == "200Mi"
    assert pods["gpu-minrt-kube-bridge"]["nodeSelector"] == {"example.com/node-pool": "bridge"}
    assert pods["gpu-minrt-processor"]["nodeSelector"] == {"example.com/node-pool": "system"}
    assert pods["gpu-minrt-processor"]["tolerations"][0]["value"] == "system"
    assert all(pod["imagePullSecrets"] == [{"name": "registry-pull"}] for pod in pods.values())

    (config_map,) = by_kind(everything, "ConfigMap").values()
    config = config_map["data"]
    settings = Settings(**{k.removeprefix("MINRUNTIME_").lower(): v for k, v in config.items()})
    assert settings.kafka_security_protocol == "SASL_SSL"
    assert settings.kafka_sasl_mechanism == "PLAIN"
    assert settings.kafka_ssl_check_hostname is False
    assert settings.kafka_ssl_cafile == Path("/etc/minruntime/kafka-tls/ca.pem")
    assert settings.kube_scheduler_config == "kai-system/scheduler-config-a100"
    assert settings.kube_scheduler_node_pool == "a100"
    assert settings.kube_node_pool_label == "example.com/node-pool"
    assert settings.kube_namespace == EVERYTHING_NAMESPACE
    assert settings.kube_lease_name == "gpu-minrt-kube-bridge"
    assert (settings.batch_max_events, settings.topic_podgroups) == (500, "team-a.podgroups")
    assert settings.processor_metrics_port == 9500
    assert settings.kube_evictor_metrics_port == 9503

    # Each Secret goes only where it is used; TLS files are mounted where they are named.
    envs = {name: environment(everything, c) for name, c in containers.items()}
    kafka_users = {"gpu-minrt-processor", "gpu-minrt-requeue-worker"} | {
        "gpu-minrt-kube-bridge",
        "gpu-minrt-kube-evictor",
    }
    database_users = {"gpu-minrt-processor", "gpu-minrt-requeue-worker"} | {
        "gpu-minrt-snapshotter",
        "gpu-minrt-migrate",
    }
    # The bridge's drift check only reads: the reader role's URL (database.readerUrlKey).
    reader = "gpu-minrt-kube-bridge"
    assert envs[reader]["MINRUNTIME_DATABASE_URL"] == "secret pg-urls/reader"
    for name, env in envs.items():
        assert (env.get("MINRUNTIME_KAFKA_PASSWORD") == "secret kafka-user/pw") == (
            name in kafka_users
        )
        assert (env.get("MINRUNTIME_DATABASE_URL") == "secret pg-urls/runtime") == (
            name in database_users
        )
        mounts = {m["mountPath"] for m in containers[name].get("volumeMounts", [])}
        assert ("/etc/minruntime/kafka-tls" in mounts) == (name in kafka_users), name
        assert ("/etc/minruntime/postgres-tls" in mounts) == (name in database_users | {reader}), (
            name
        )
    assert envs["gpu-minrt-kube-evictor"]["MINRUNTIME_KAFKA_USERNAME"] == "secret kafka-user/user"
    owner = {name for name, env in envs.items() if "MINRUNTIME_OWNER_DATABASE_URL" in env}
    assert owner == {"gpu-minrt-migrate"}
    assert envs["gpu-minrt-migrate"]["MINRUNTIME_OWNER_DATABASE_URL"] == "secret pg-urls/owner"

    roles = rbac(everything)
    assert roles["Role", EVERYTHING_NAMESPACE, "gpu-minrt-bridge-lease"] == {
        ("coordination.k8s.io", "leases", "*", "create"),
        ("coordination.k8s.io", "leases", "gpu-minrt-kube-bridge", "get"),
        ("coordination.k8s.io", "leases", "gpu-minrt-kube-bridge", "update"),
    }
    assert roles["Role", "kai-system", "gpu-minrt-scheduler-config"] == {
        ("", "configmaps", "scheduler-config-a100", "list"),
        ("", "configmaps", "scheduler-config-a100", "watch"),
    }
    assert ("Role", "kai-scheduler", "gpu-minrt-scheduler-config") not in roles


@pytest.mark.parametrize("render", ["defaults", "everything"])
def test_every_container_runs_a_real_command_with_real_settings(
    request: pytest.FixtureRequest, render: str
) -> None:
    objects: list[dict[str, Any]] = request.getfixturevalue(render)
    for name, pod in workloads(objects).items():
        (container,) = pod["containers"]
        assert "command" not in container, "the image's entrypoint is `minruntime`"
        assert_a_real_minruntime_command(container["args"], name)
    names = setting_names(objects)
    assert names <= SETTINGS, names - SETTINGS


def test_only_the_bridge_and_the_evictor_hold_an_api_token(
    everything: list[dict[str, Any]],
) -> None:
    (account,) = by_kind(everything, "ServiceAccount")
    for name, pod in workloads(everything).items():
        if name in ("gpu-minrt-kube-bridge", "gpu-minrt-kube-evictor"):
            assert pod["serviceAccountName"] == account
        else:
            assert pod["automountServiceAccountToken"] is False, name


@pytest.mark.parametrize(
    ("switched_on", "kinds"),
    [
        (
            ["processor"],
            {("ConfigMap", "gpu-minrt"), ("Deployment", "gpu-minrt-processor")},
        ),
        (
            ["evictor"],
            {
                ("ConfigMap", "gpu-minrt"),
                ("Deployment", "gpu-minrt-kube-evictor"),
                ("ServiceAccount", "gpu-minrt-cluster"),
                ("ClusterRole", "gpu-minrt-evictor"),
                ("ClusterRoleBinding", "gpu-minrt-evictor"),
            },
        ),
    ],
)
def test_components_switched_off_leave_nothing_behind(
    helm: Helm, switched_on: list[str], kinds: set[tuple[str, str]]
) -> None:
    components = ("migrate", "processor", "requeueWorker", "snapshotter", "bridge", "evictor")
    switches = [f"{c}.enabled={str(c in switched_on).lower()}" for c in components]
    objects = helm.template(
        "-f", EVERYTHING, *OPERATOR, "--set", ",".join(switches), namespace=EVERYTHING_NAMESPACE
    )
    rendered = {(o["kind"], o["metadata"]["name"]) for o in objects}
    services = {
        "processor": ("Service", "gpu-minrt-processor"),
        "evictor": ("Service", "gpu-minrt-kube-evictor"),
    }
    monitor = ("ServiceMonitor", "gpu-minrt")
    scraped = {*services.values(), monitor}
    assert rendered - {("PrometheusRule", "gpu-minrt")} - scraped == kinds
    for component, service in services.items():
        assert (service in rendered) == (component in switched_on), component
    assert (monitor in rendered) == bool(set(services) & set(switched_on))


def test_monitoring_needs_the_operator_and_its_switch(helm: Helm) -> None:
    def monitoring(*args: str) -> set[str]:
        objects = helm.template("-f", EVERYTHING, *args, namespace=EVERYTHING_NAMESPACE)
        return {o["kind"] for o in objects} & (MONITORING_KINDS | {"Service"})

    assert monitoring() == set(), "no CRDs, no ServiceMonitor (nor its Services)"
    assert monitoring(*OPERATOR) == MONITORING_KINDS | {"Service"}
    off = ("--set", "monitoring.serviceMonitor.enabled=false")
    assert monitoring(*OPERATOR, *off) == {"PrometheusRule"}
    assert monitoring(*OPERATOR, "--set", "monitoring.prometheusRule.enabled=false") == {
        "ServiceMonitor",
        "Service",
    }


SCRAPED = {
    "gpu-minrt-processor": "MINRUNTIME_PROCESSOR_METRICS_PORT",
    "gpu-minrt-requeue-worker": "MINRUNTIME_WORKER_METRICS_PORT",
    "gpu-minrt-kube-bridge": "MINRUNTIME_KUBE_BRIDGE_METRICS_PORT",
    "gpu-minrt-kube-evictor": "MINRUNTIME_KUBE_EVICTOR_METRICS_PORT",
}


def test_the_service_monitor_scrapes_every_metrics_port(everything: list[dict[str, Any]]) -> None:
    """What a dry run cannot check (the Operator's CRDs are not on the API server): the
    ServiceMonitor selects the metrics Services, and each Service reaches the port its pods
    serve /metrics on (the setting; the container's declared port, where it declares one)."""
    (monitor,) = by_kind(everything, "ServiceMonitor").values()
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["endpoints"]
    services = by_kind(everything, "Service")
    assert set(services) == set(SCRAPED)
    deployments = by_kind(everything, "Deployment")
    for name, service in services.items():
        assert service["metadata"]["labels"].items() >= selector.items()
        (port,) = service["spec"]["ports"]
        assert port["name"] == endpoint["port"] == "metrics"
        pod = deployments[name]["spec"]["template"]
        assert pod["metadata"]["labels"].items() >= service["spec"]["selector"].items()
        (container,) = pod["spec"]["containers"]
        served = environment(everything, container)[SCRAPED[name]]
        assert port["targetPort"] == port["port"] == int(served), name
        declared = [p["containerPort"] for p in container.get("ports", [])]
        assert declared in ([], [port["port"]]), name
    assert endpoint["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_prometheus_rule_is_the_rule_file(everything: list[dict[str, Any]]) -> None:
    linked = CHART / "files" / "minruntime-rules.yaml"
    # Helm follows a symlink when it loads a chart directory (and `helm package` stores the
    # target's contents), so the chart holds no copy that could drift.
    assert linked.is_symlink()
    assert linked.resolve() == RULES.resolve()
    (rule,) = by_kind(everything, "PrometheusRule").values()
    assert rule["spec"]["groups"] == rule_groups(RULES)


RULE_FILE = """groups:
  - name: minruntime-example
    rules:
      - alert: MinruntimeProcessorDown
        expr: up{job="minruntime-processor"} == 0
        for: 5m
        labels: {severity: page}
        annotations:
          summary: "{{ $labels.pod }} has not been scraped for 5 minutes"
      - record: minruntime:consumer_lag:max
        expr: max(minruntime_consumer_lag)
"""


@pytest.fixture
def chart_with_rules(tmp_path: Path) -> Path:
    """A copy of the chart whose rule file has rules (with Prometheus' own {{ }} templates)."""
    chart = tmp_path / "minruntime"
    shutil.copytree(CHART, chart, symlinks=True)
    rules = chart / "files" / "minruntime-rules.yaml"
    rules.unlink()
    rules.write_text(RULE_FILE)
    return chart


def test_the_prometheus_rule_carries_any_rule_file_verbatim(
    helm: Helm, chart_with_rules: Path
) -> None:
    objects = helm.template(*OPERATOR, chart=chart_with_rules)
    (rule,) = by_kind(objects, "PrometheusRule").values()
    assert rule["spec"]["groups"] == yaml.safe_load(RULE_FILE)["groups"]


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (["--set", "kafka.securityProtocol=SASL_SSL"], "kafka.sasl.existingSecret is required"),
        (["--set", "kafka.securityProtocol=TLS"], "value must be one of"),
        (["--set", "procesor.replicas=2"], "'procesor' not allowed"),
        (["--set", "config.KAFKA_BOOTSTRAP=x"], "does not match pattern '^MINRUNTIME_"),
        (["--set", "config.MINRUNTIME_KUBE_NAMESPACE=x"], "the chart sets it"),
        (
            ["--set", "kafka.securityProtocol=SSL,kafka.tls.existingSecret=ca,kafka.tls.certKey=c"],
            "both or neither",
        ),
    ],
)
def test_values_the_chart_refuses(helm: Helm, values: list[str], refusal: str) -> None:
    done = helm.run("template", "minruntime", CHART, *values)
    assert done.returncode != 0
    assert refusal in done.stderr, done.stderr


def _dry_run(kubeconfig: Path, objects: list[dict[str, Any]]) -> None:
    """Server-side apply of every object with dryRun=All: full validation and admission,
    nothing stored. ServiceMonitor and PrometheusRule are left out: the Prometheus Operator's
    CRDs are not installed on this shared API server (installing a stand-in would validate
    nothing of the Operator's own schema), so the tests above check them instead."""
    objects = [o for o in objects if o["kind"] not in MONITORING_KINDS]
    with admin_client(kubeconfig) as api:
        for namespace in {
            o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]
        }:
            ensure_namespace(api, namespace)
        applied = apply(api, objects, dry_run=True)
        assert [(a.kind, a.metadata.name) for a in applied] == [
            (o["kind"], o["metadata"]["name"]) for o in objects
        ]
        deployment = next(o for o in objects if o["kind"] == "Deployment")["metadata"]
        with pytest.raises(ApiException) as absent:
            client.AppsV1Api(api).read_namespaced_deployment(
                deployment["name"], deployment["namespace"]
            )
        assert absent.value.status == 404, "a dry run must create nothing"


def test_the_defaults_pass_a_server_side_dry_run(kube_stack: StackStatus, helm: Helm) -> None:
    assert kube_stack.kubeconfig is not None
    _dry_run(kube_stack.kubeconfig, helm.template(namespace=DRY_RUN_NAMESPACE))


def test_every_value_passes_a_server_side_dry_run(
    kube_stack: StackStatus, everything: list[dict[str, Any]]
) -> None:
    assert kube_stack.kubeconfig is not None
    assert {o["kind"] for o in everything} >= MONITORING_KINDS
    _dry_run(kube_stack.kubeconfig, everything)
