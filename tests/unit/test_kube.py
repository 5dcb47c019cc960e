"""Kubernetes-native input: Queue YAML and KAI's scheduler config translated into events."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from minruntime.cli import main
from minruntime.cluster.mapping import queue_data
from minruntime.core import ClusterState, Node, QueueTree, RequeueOutcome, RequeueReason
from minruntime.events import ConfigUpdatedData, QueueUpsertedData
from minruntime.events.inputs import QueueResource, QueueResources
from minruntime.kube import (
    Manifest,
    ManifestError,
    config_update,
    parse_manifests,
    queue_upserts,
    read_manifests,
)
from tests.conftest import ROOT
from tests.unit.core.core_testkit import nominated, pending_pg, plan, running_pg
from tests.unit.test_cli import one_error_line

EXAMPLES = ROOT / "schemas" / "examples"

# The seed document's examples, verbatim.
SEED_QUEUE = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: production
spec:
  preemptMinRuntime: "20s"
  reclaimMinRuntime: "30s"
"""
SEED_CONFIG = """\
tiers:
- plugins:
  # other plugins...
  - name: minruntime
    arguments:
      defaultPreemptMinRuntime: "10m"
      defaultReclaimMinRuntime: "10m"
      reclaimResolveMethod: "lca"  # or "queue"
"""


def queue_yaml(name: str, spec: str = "", api_version: str = "scheduling.run.ai/v2") -> str:
    body = f"apiVersion: {api_version}\nkind: Queue\nmetadata:\n  name: {name}\n"
    return body + (f"spec:\n{spec}" if spec else "")


def queues(text: str, file: str = "queues.yaml") -> list[QueueUpsertedData]:
    return queue_upserts(parse_manifests(file, text))


def config(text: str, node_pool: str = "default", file: str = "config.yaml") -> ConfigUpdatedData:
    return config_update(parse_manifests(file, text), node_pool)


# A Queue without spec.resources, as KAI reads it (getQueueQuota,
# pkg/scheduler/api/queue_info/queue_info.go): quota, limit and weight 0 everywhere.
KAI_ZERO = QueueResources(
    **{
        name: QueueResource(quota=0, limit=0, over_quota_weight=0)
        for name in ("gpu", "cpu", "memory")
    }
)
ZERO_JSON = {
    name: {"quota": 0.0, "limit": 0.0, "overQuotaWeight": 0.0} for name in ("gpu", "cpu", "memory")
}
UNLIMITED_JSON = {
    name: {"quota": -1.0, "limit": -1.0, "overQuotaWeight": 1.0}
    for name in ("gpu", "cpu", "memory")
}


def error_of(read: Callable[..., object], *args: str) -> str:
    """The one-line ManifestError of `read(*args)` (`queues` or `config`)."""
    with pytest.raises(ManifestError) as caught:
        read(*args)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- the seed's examples, verbatim ---------------------------------------------------------------


def test_the_seed_queue_becomes_one_upsert() -> None:
    # It has no spec.resources: KAI gives it quota 0 and limit 0 (it schedules nothing there).
    assert queues(SEED_QUEUE) == [
        QueueUpsertedData(
            name="production",
            preempt_min_runtime=timedelta(seconds=20),
            reclaim_min_runtime=timedelta(seconds=30),
            resources=KAI_ZERO,
        )
    ]


def test_the_seed_scheduler_config_becomes_one_config_update() -> None:
    update = config(SEED_CONFIG)
    assert update.node_pool == "default"
    assert update.default_preempt_min_runtime == timedelta(minutes=10)
    assert update.default_reclaim_min_runtime == timedelta(minutes=10)
    assert update.reclaim_resolve_method == "lca"
    assert update.default_requeue_delay == timedelta(minutes=5)  # not a KAI argument: default


def test_the_examples_hold_the_seed_text_verbatim() -> None:
    # The seed's Queue plus unlimited resources: without them KAI would schedule nothing in it.
    [example] = queue_upserts(read_manifests([str(EXAMPLES / "queue.production.yaml")]))
    [seed] = queues(SEED_QUEUE)
    assert example == seed.model_copy(
        update={"resources": QueueResources.model_validate(UNLIMITED_JSON)}
    )
    assert (EXAMPLES / "scheduler-config.yaml").read_text() == SEED_CONFIG


# -- queues ---------------------------------------------------------------------------------------


def test_the_tree_example_is_several_documents_in_file_order() -> None:
    upserts = queue_upserts(read_manifests([str(EXAMPLES / "queues.tree.yaml")]))
    assert [(u.name, u.parent_queue) for u in upserts] == [
        ("research", None),
        ("vision", "research"),
        ("nlp", "research"),
        ("nlp-interactive", "nlp"),
    ]
    # displayName and labels are accepted and ignored.
    assert upserts[0].reclaim_min_runtime == timedelta(minutes=10)
    assert upserts[0].preempt_min_runtime is None
    assert upserts[3].preempt_min_runtime == timedelta(0)  # 0s is set, not unset
    # Every example queue states all three resources: KAI schedules in each of them.
    for upsert in upserts:
        assert upsert.resources is not None
        assert None not in (upsert.resources.gpu, upsert.resources.cpu, upsert.resources.memory)
        assert upsert.resources.cpu == QueueResource(quota=-1, limit=-1, over_quota_weight=1)


def test_every_real_queue_spec_field_is_accepted() -> None:
    spec = (
        "  displayName: Team A\n  parentQueue: org\n  priority: 100\n"
        "  resources:\n    gpu: {quota: 4, overQuotaWeight: 1, limit: -1, lendingLimit: 2}\n"
        '  preemptMinRuntime: "1h30m"\n  reclaimMinRuntime: null\n'
    )
    [upsert] = queues(queue_yaml("team-a", spec) + "status:\n  childQueues: [x]\n")
    # KAI's spec.priority and spec.resources are carried (issue 27); lendingLimit, a field of
    # another KAI version, is ignored; what the object leaves out is KAI's zero value.
    zero = QueueResource(quota=0, limit=0, over_quota_weight=0)
    assert upsert == QueueUpsertedData(
        name="team-a",
        parent_queue="org",
        preempt_min_runtime=timedelta(minutes=90),
        priority=100,
        resources=QueueResources(
            gpu=QueueResource(quota=4, limit=-1, over_quota_weight=1), cpu=zero, memory=zero
        ),
    )


def test_a_beneficiary_in_a_queue_without_resources_rolls_back_over_quota(
    tmp_path: Path,
) -> None:
    # `queues apply -f` and the bridge (its mapping) read the same Queue: KAI would never place
    # the beneficiary (limit 0), so the planner must not evict the victim for it.
    path = tmp_path / "queues.yaml"
    path.write_text(
        queue_yaml("train") + "---\n" + queue_yaml("burst", '  preemptMinRuntime: "0s"\n')
    )
    applied = [upsert.to_queue() for upsert in queue_upserts(read_manifests([str(path)]))]
    bridged = [
        queue_data(
            {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}}
        ).to_queue()
        for name in ("train", "burst")
    ]
    cluster = ClusterState(
        nodes=(Node(name="n1", gpu=4.0),),
        running=(running_pg("hog", queue="train"),),
        pending=(pending_pg("lift", queue="burst", priority=10),),
    )
    for queues_read in (applied, bridged):
        (decision,) = plan(cluster, nominated("hog"), tree=QueueTree(queues_read)).decisions
        assert decision.outcome is RequeueOutcome.ROLLED_BACK
        assert decision.reason is RequeueReason.BENEFICIARY_OVER_QUOTA
        assert decision.quota is not None
        assert decision.quota.queue == "burst"
    # The same queues with KAI's quick-start resources: the requeue commits.
    unlimited = QueueResources.model_validate(UNLIMITED_JSON)
    managed = [
        upsert.model_copy(update={"resources": unlimited}).to_queue()
        for upsert in queue_upserts(read_manifests([str(path)]))
    ]
    (decision,) = plan(cluster, nominated("hog"), tree=QueueTree(managed)).decisions
    assert decision.outcome is RequeueOutcome.COMMITTED
    assert decision.beneficiaries == ("lift",)


def test_queue_priority_and_resources_reach_the_core_queue() -> None:
    spec = "  priority: 50\n  resources:\n    gpu: {quota: 0.5, limit: 2}\n"
    [upsert] = queues(queue_yaml("burst", spec))
    queue = upsert.to_queue()
    assert queue.priority == 50
    assert queue.resources is not None
    assert queue.resources.gpu is not None
    assert (queue.resources.gpu.quota, queue.resources.gpu.limit) == (0.5, 2)
    assert queue.resources.gpu.over_quota_weight == 0  # absent: KAI's zero value


def test_bad_queue_priority_and_resources_are_one_line_errors() -> None:
    for spec, said in (
        ("  priority: high\n", "spec.priority: must be an integer"),
        ("  resources: [1]\n", "spec.resources: must be a mapping"),
        ("  resources:\n    gpu: {quota: many}\n", "spec.resources.gpu.quota: must be a number"),
        ("  resources:\n    gpu: {limit: -5}\n", "greater than or equal to -1"),
    ):
        assert said in error_of(queues, queue_yaml("q", spec), "q.yaml")


def test_an_empty_parent_and_a_missing_spec_make_a_plain_root() -> None:
    assert queues(queue_yaml("a", '  parentQueue: ""\n')) == [
        QueueUpsertedData(name="a", resources=KAI_ZERO)
    ]
    assert queues(queue_yaml("b")) == [QueueUpsertedData(name="b", resources=KAI_ZERO)]


def test_a_queue_without_resources_gets_kais_zero_quota_and_limit() -> None:
    # Absent or null: KAI's getQueueQuota returns its zero QueueQuota, never "unmanaged".
    for spec in ('  preemptMinRuntime: "1m"\n', "  resources: null\n", "  resources: {}\n"):
        [upsert] = queues(queue_yaml("q", spec))
        assert upsert.resources == KAI_ZERO, spec
        assert upsert.model_dump(mode="json", by_alias=True)["resources"] == ZERO_JSON
        queue = upsert.to_queue()
        assert queue.resources is not None
        assert queue.resources.gpu is not None
        assert (queue.resources.gpu.quota, queue.resources.gpu.limit) == (0, 0)


def test_empty_documents_are_skipped_but_counted() -> None:
    text = "---\n# nothing here\n---\n" + queue_yaml("a") + "---\n" + queue_yaml("b") + "---\n"
    manifests = parse_manifests("q.yaml", text)
    assert [(m.document, m.name) for m in manifests] == [(2, "a"), (3, "b")]


def test_a_kubectl_list_is_expanded_into_its_items() -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: scheduling.run.ai/v2, kind: Queue, metadata: {name: a}}\n"
        "- {apiVersion: scheduling.run.ai/v2, kind: Queue, metadata: {name: b},"
        " spec: {parentQueue: a, preemptMinRuntime: 1x}}\n"
    )
    message = error_of(queues, text, "all.yaml")
    assert message == (
        'all.yaml document 1 item 2 (Queue "b"): spec.preemptMinRuntime: '
        "invalid duration '1x': unknown unit 'x' (use one of ns, us, ms, s, m, h, d, w)"
    )


def test_a_directory_reads_its_yaml_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(queue_yaml("child", "  parentQueue: root\n"))
    (tmp_path / "a.yaml").write_text(queue_yaml("root") + "---\n" + queue_yaml("other"))
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / ".hidden.yaml").write_text("kind: Secret")
    manifests = read_manifests([str(tmp_path)])
    assert [(Path(m.file).name, m.document, m.name) for m in manifests] == [
        ("a.yaml", 1, "root"),
        ("a.yaml", 2, "other"),
        ("b.yml", 1, "child"),
    ]
    assert [u.name for u in queue_upserts(manifests)] == ["root", "other", "child"]


def test_several_files_and_stdin(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    first.write_text(queue_yaml("a"))
    manifests = read_manifests([str(first), "-"], read_stdin=lambda: queue_yaml("b"))
    assert [(m.file, m.name) for m in manifests] == [(str(first), "a"), ("<stdin>", "b")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            queue_yaml("production")
            + "---\n"
            + queue_yaml("research", '  preemptMinRuntime: "10x"\n'),
            'queues.yaml document 2 (Queue "research"): spec.preemptMinRuntime: invalid duration'
            " '10x': unknown unit 'x' (use one of ns, us, ms, s, m, h, d, w)",
        ),
        (
            queue_yaml("a", '  reclaimMinRuntime: "-5m"\n'),
            'queues.yaml document 1 (Queue "a"): spec.reclaimMinRuntime: invalid duration'
            " '-5m': negative durations are not allowed",
        ),
        (
            queue_yaml("a", "  reclaimMinRuntime: 30\n"),
            'queues.yaml document 1 (Queue "a"): spec.reclaimMinRuntime: must be a duration'
            ' string such as "20s" (quote it), got 30',
        ),
        (
            queue_yaml("a", '  preemptMinRunTime: "20s"\n'),
            'queues.yaml document 1 (Queue "a"): spec.preemptMinRunTime: unknown field (a'
            " scheduling.run.ai/v2 Queue spec has displayName, parentQueue, preemptMinRuntime,"
            " priority, reclaimMinRuntime, resources)",
        ),
        (
            queue_yaml("a", "  parentQueue: [b]\n"),
            'queues.yaml document 1 (Queue "a"): spec.parentQueue: must be a queue name,'
            " got a list",
        ),
        (
            queue_yaml("a", "  - just a list\n"),
            'queues.yaml document 1 (Queue "a"): spec: must be a mapping, got a list',
        ),
        (
            queue_yaml("a")
            + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
            'queues.yaml document 2 (Deployment "web"): kind: a Deployment (apps/v1) is not'
            " accepted here: `minruntime queues apply` accepts scheduling.run.ai/v2 Queue objects"
            " (or a v1 List of them)",
        ),
        (
            queue_yaml("a", api_version="scheduling.run.ai/v2alpha2"),
            "queues.yaml document 1 (Queue \"a\"): apiVersion: 'scheduling.run.ai/v2alpha2' is"
            " not supported: use scheduling.run.ai/v2 (the Queue version with preemptMinRuntime"
            " and reclaimMinRuntime)",
        ),
        (
            "kind: Queue\nmetadata: {name: a}\n",
            'queues.yaml document 1 (Queue "a"): apiVersion: required field is missing'
            " (expected scheduling.run.ai/v2)",
        ),
        (
            "apiVersion: scheduling.run.ai/v2\nmetadata: {name: a}\n",
            'queues.yaml document 1 (object "a"): kind: required field is missing (expected Queue)',
        ),
        (
            "apiVersion: scheduling.run.ai/v2\nkind: Queue\nspec: {}\n",
            "queues.yaml document 1: metadata.name: required field is missing (the queue's name)",
        ),
        (
            "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: 7}\n",
            "queues.yaml document 1: metadata.name: must be a non-empty string, got 7",
        ),
        (
            "- a\n- b\n",
            "queues.yaml document 1: not a Kubernetes object: expected a mapping, got a list",
        ),
        (
            queue_yaml("a") + "---\n" + queue_yaml("a", '  preemptMinRuntime: "1m"\n'),
            "queues.yaml document 2 (Queue \"a\"): metadata.name: queue 'a' is defined twice"
            ' (also in queues.yaml document 1 (Queue "a"))',
        ),
        (
            queue_yaml("a", "  parentQueue: b\n") + "---\n" + queue_yaml("b", "  parentQueue: a\n"),
            'queues.yaml document 1 (Queue "a"): spec.parentQueue: queue change would create a'
            " cycle: a -> b -> a; change the parentQueue of one of these queues",
        ),
        (
            queue_yaml("a") + "---\nkind: [unclosed\n",
            "queues.yaml document 2: not valid YAML: while parsing a flow sequence; expected ',' or"
            " ']', but got '<stream end>' at line 7, column 1",
        ),
        (
            "apiVersion: v1\nkind: List\nitems: {a: 1}\n",
            "queues.yaml document 1: items: must be a list of objects, got a mapping",
        ),
        (
            SEED_CONFIG,
            "queues.yaml document 1: kind: required field is missing (expected Queue); this"
            " looks like a scheduler config: use `minruntime config apply`",
        ),
    ],
)
def test_queue_errors_name_file_document_and_field(text: str, expected: str) -> None:
    assert error_of(queues, text) == expected


def test_a_self_parent_is_a_cycle() -> None:
    assert error_of(queues, queue_yaml("a", "  parentQueue: a\n")).endswith(
        "spec.parentQueue: queue change would create a cycle: a -> a; change the parentQueue of"
        " one of these queues"
    )


# -- the scheduler config -------------------------------------------------------------------------

CONFIG_MAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: scheduler-config
  namespace: kai-scheduler
data:
  config.yaml: |
    actions: allocate, consolidation, reclaim, preempt, stalegangeviction
    tiers:
      - plugins:
          - name: predicates
          - name: proportion
      - plugins:
          - name: minruntime
            arguments:
              defaultReclaimMinRuntime: "15m"
              reclaimResolveMethod: queue
"""


def test_the_config_map_as_kai_ships_it() -> None:
    update = config(CONFIG_MAP, node_pool="a100")
    assert update == ConfigUpdatedData(
        node_pool="a100",
        default_reclaim_min_runtime=timedelta(minutes=15),
        reclaim_resolve_method="queue",
    )
    assert update.subject == "config/a100"


def test_the_config_map_example_file() -> None:
    update = config_update(read_manifests([str(EXAMPLES / "scheduler-config.configmap.yaml")]))
    assert update.default_preempt_min_runtime == timedelta(minutes=5)
    assert update.default_reclaim_min_runtime == timedelta(minutes=15)
    assert update.reclaim_resolve_method == "queue"


@pytest.mark.parametrize(
    "plugin",
    [
        "  - name: minruntime\n",
        "  - name: minruntime\n    arguments: {}\n",
        "  - name: minruntime\n    arguments:\n      defaultPreemptMinRuntime: null\n",
    ],
)
def test_absent_or_null_arguments_take_the_defaults(plugin: str) -> None:
    update = config("tiers:\n- plugins:\n  - name: proportion\n" + plugin)
    assert update == ConfigUpdatedData()


def test_every_argument_is_a_kai_string() -> None:
    update = config(
        "tiers:\n- plugins:\n  - name: minruntime\n    arguments:\n"
        "      defaultPreemptMinRuntime: 1h\n      defaultReclaimMinRuntime: 2d\n"
        "      reclaimResolveMethod: lca\n      defaultRequeueDelay: 90s\n"
        '      maxRequeues: "3"\n      maxRequeuesWindow: 1d\n'
    )
    # On the wire the cap is a JSON integer (the argument is KAI's string).
    assert update.model_dump(mode="json") == {
        "nodePool": "default",
        "defaultPreemptMinRuntime": "1h",
        "defaultReclaimMinRuntime": "48h",
        "reclaimResolveMethod": "lca",
        "defaultRequeueDelay": "1m30s",
        "maxRequeues": 3,
        "maxRequeuesWindow": "24h",
    }


def plugin_config(arguments: str) -> str:
    return "tiers:\n- plugins:\n  - name: gang\n  - name: minruntime\n    arguments:\n" + arguments


ARGS = "config.yaml document 1: tiers[0].plugins[1].arguments"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            plugin_config('      defaultPreemptMinRuntime: "10x"\n'),
            f"{ARGS}.defaultPreemptMinRuntime: invalid duration '10x': unknown unit 'x'"
            " (use one of ns, us, ms, s, m, h, d, w)",
        ),
        (
            plugin_config('      defaultReclaimMinRuntime: "-1m"\n'),
            f"{ARGS}.defaultReclaimMinRuntime: invalid duration '-1m': negative durations are not"
            " allowed",
        ),
        (
            plugin_config("      reclaimResolveMethod: median\n"),
            f"{ARGS}.reclaimResolveMethod: must be one of lca, queue, got 'median'",
        ),
        (
            plugin_config('      defaultRequeueDelay: "0s"\n'),
            f"{ARGS}.defaultRequeueDelay: must be positive, got 0s",
        ),
        (
            plugin_config("      defaultPreemptMinRuntime: 0\n"),
            f"{ARGS}.defaultPreemptMinRuntime: must be a string (KAI plugin arguments are strings;"
            " quote it), got 0",
        ),
        (
            plugin_config('      preemptMinRuntime: "10m"\n'),
            f"{ARGS}: unknown minruntime argument(s) preemptMinRuntime; known:"
            " defaultPreemptMinRuntime, defaultReclaimMinRuntime, defaultRequeueDelay,"
            " evictionWindow, maxEvictionsPerWindow, maxRequeues, maxRequeuesWindow,"
            " minEvictionGap, reclaimResolveMethod",
        ),
        (
            plugin_config('      maxRequeues: "0"\n'),
            f"{ARGS}.maxRequeues: must be from 1 to 1000, got 0",
        ),
        (
            plugin_config('      maxRequeues: "5000"\n'),
            f"{ARGS}.maxRequeues: must be from 1 to 1000, got 5000",
        ),
        (
            plugin_config("      maxRequeues: 3\n"),
            f"{ARGS}.maxRequeues: must be a string (KAI plugin arguments are strings;"
            " quote it), got 3",
        ),
        (
            plugin_config('      maxRequeuesWindow: "0s"\n'),
            f"{ARGS}.maxRequeuesWindow: must be positive and at most 8784h, got 0s",
        ),
        (
            plugin_config("      - defaultPreemptMinRuntime\n"),
            f"{ARGS}: must be a mapping of argument names to strings, got a list",
        ),
        (
            "actions: allocate\ntiers:\n- plugins:\n  - name: proportion\n  - name: gang\n",
            "config.yaml document 1: tiers: no minruntime plugin (plugins: proportion, gang); add"
            " `- name: minruntime` with its arguments to a tier's plugins",
        ),
        (
            "tiers:\n- plugins:\n  - name: minruntime\n- plugins:\n  - name: minruntime\n",
            "config.yaml document 1: tiers[1].plugins[0]: the minruntime plugin is listed twice"
            " (also at tiers[0].plugins[0])",
        ),
        (
            "tiers: minruntime\n",
            "config.yaml document 1: tiers: must be a list of tiers, got 'minruntime'",
        ),
        (
            "tiers:\n- plugins:\n  - minruntime\n",
            "config.yaml document 1: tiers[0].plugins[0]: must be a mapping with a name",
        ),
        (
            "actions: allocate\n",
            "config.yaml document 1: tiers: required field is missing: a KAI scheduler config"
            " lists its plugins under tiers[].plugins[] (`minruntime config apply` accepts KAI's"
            " scheduler config (the tiers: YAML) or the v1 ConfigMap that holds it under"
            ' data["config.yaml"])',
        ),
        (
            SEED_CONFIG + "---\n" + SEED_CONFIG,
            "config.yaml document 2: a second scheduler config (the first is config.yaml"
            " document 1); apply one node pool's scheduler config at a time",
        ),
        (
            SEED_QUEUE,
            'config.yaml document 1 (Queue "production"): kind: a Queue (scheduling.run.ai/v2) is'
            " not accepted here: `minruntime config apply` accepts KAI's scheduler config (the"
            ' tiers: YAML) or the v1 ConfigMap that holds it under data["config.yaml"]; use'
            " `minruntime queues apply` for queues",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: scheduler-config}\n"
            "data:\n  scheduler.yaml: 'tiers: []'\n",
            'config.yaml document 1 (ConfigMap "scheduler-config"): data: no "config.yaml" key'
            " (found: scheduler.yaml); KAI's scheduler ConfigMap holds the scheduler config there",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\n"
            "data:\n  config.yaml: 'tiers: [unclosed'\n",
            'config.yaml document 1 (ConfigMap "s"): data["config.yaml"]: not valid YAML: while'
            " parsing a flow sequence; expected ',' or ']', but got '<stream end>' at line 1,"
            " column 17",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\n"
            "data:\n  config.yaml: |\n    tiers:\n    - plugins:\n      - name: minruntime\n"
            "        arguments: {defaultPreemptMinRuntime: 5}\n",
            'config.yaml document 1 (ConfigMap "s"): data["config.yaml"].tiers[0].plugins[0]'
            ".arguments.defaultPreemptMinRuntime: must be a string (KAI plugin arguments are"
            " strings; quote it), got 5",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\n"
            "data:\n  config.yaml: 'actions: allocate'\n",
            'config.yaml document 1 (ConfigMap "s"): data["config.yaml"].tiers: required field'
            " is missing",
        ),
    ],
)
def test_config_errors_name_file_document_and_field(text: str, expected: str) -> None:
    assert error_of(config, text) == expected


def test_an_empty_node_pool_is_refused() -> None:
    assert error_of(config, SEED_CONFIG, "") == "the node pool name must not be empty"


# -- reading ------------------------------------------------------------------------------------


def test_reading_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ManifestError, match=r"nope\.yaml: cannot read: .*No such file"):
        read_manifests([str(missing)])
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(ManifestError) as caught:
        read_manifests([str(empty_dir)])
    assert str(caught.value) == f"{empty_dir}: no .yaml, .yml, .json files in this directory"
    blank = tmp_path / "blank.yaml"
    blank.write_text("# nothing\n---\n")
    with pytest.raises(ManifestError) as caught:
        read_manifests([str(blank)])
    assert str(caught.value) == f"nothing to apply: no YAML documents in {blank}"


def test_manifest_location_labels() -> None:
    named = Manifest("q.yaml", 3, {"metadata": {"name": "x"}})
    assert named.where == 'q.yaml document 3 (object "x")'
    assert Manifest("q.yaml", 1, {}, item=2).where == "q.yaml document 1 item 2"


# -- the commands, without Kafka (--dry-run) ----------------------------------------------------


def test_queues_apply_dry_run_prints_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = str(EXAMPLES / "queues.tree.yaml")
    production = str(EXAMPLES / "queue.production.yaml")
    assert main(["queues", "apply", "-f", tree, "--filename", production, "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    events = [json.loads(line) for line in captured.out.splitlines()]
    assert [e["subject"] for e in events] == [
        "research",
        "vision",
        "nlp",
        "nlp-interactive",
        "production",
    ]
    assert {e["type"] for e in events} == {"queue.upserted"}
    assert {e["source"] for e in events} == {"minruntime-cli"}
    assert len({e["id"] for e in events}) == 5
    assert events[-1]["data"] == {
        "name": "production",
        "preemptMinRuntime": "20s",
        "reclaimMinRuntime": "30s",
        "resources": UNLIMITED_JSON,
    }
    # The output is valid input for `minruntime produce` (checked without sending).
    from minruntime.produce import prepare_files
    from minruntime.settings import Settings

    jsonl = tmp_path / "events.jsonl"
    jsonl.write_text(captured.out)
    assert len(prepare_files([str(jsonl)], Settings())) == 5


def test_config_apply_dry_run_prints_one_event(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "scheduler-config.yaml")
    assert main(["config", "apply", "-f", path, "--node-pool", "h100", "--dry-run"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    event = json.loads(line)
    assert event["type"] == "config.updated"
    assert event["subject"] == "config/h100"
    assert event["data"] == {
        "nodePool": "h100",
        "defaultPreemptMinRuntime": "10m",
        "defaultReclaimMinRuntime": "10m",
        "reclaimResolveMethod": "lca",
        "defaultRequeueDelay": "5m",
    }


def test_config_apply_sends_the_requeue_cap_and_refuses_a_bad_one_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "capped.yaml"
    good.write_text(plugin_config('      maxRequeues: "3"\n      maxRequeuesWindow: "2h"\n'))
    assert main(["config", "apply", "-f", str(good), "--dry-run"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    data = json.loads(line)["data"]
    assert (data["maxRequeues"], data["maxRequeuesWindow"]) == (3, "2h")
    bad = tmp_path / "bad.yaml"
    bad.write_text(plugin_config('      maxRequeues: "0"\n'))
    assert one_error_line(["config", "apply", "-f", str(bad), "--dry-run"], capsys) == (
        f"minruntime: error: {bad} document 1: tiers[0].plugins[1].arguments.maxRequeues:"
        " must be from 1 to 1000, got 0"
    )


def test_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "queues.yaml"
    bad.write_text(SEED_QUEUE + "---\n" + queue_yaml("research", '  preemptMinRuntime: "10x"\n'))
    # Nothing on stdout: all or nothing, not even the valid first queue.
    assert one_error_line(["queues", "apply", "-f", str(bad), "--dry-run"], capsys) == (
        f'minruntime: error: {bad} document 2 (Queue "research"): spec.preemptMinRuntime:'
        " invalid duration '10x': unknown unit 'x' (use one of ns, us, ms, s, m, h, d, w)"
    )
    line = one_error_line(["config", "apply", "--dry-run"], capsys)
    assert "Missing option '--filename' / '-f'" in line
