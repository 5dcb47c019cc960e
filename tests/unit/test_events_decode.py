"""decode_event / new_event / encode_event: every type, the defaults, every rejection kind."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from minruntime.core import DEFAULT_REQUEUE_DELAY, MinRuntimeConfig, Queue, SubGroup
from minruntime.events import (
    DEFAULT_TOPICS,
    EVENT_CLASSES,
    INPUT_ROLES,
    REJECTION_KINDS,
    ROLE_TYPES,
    TOPIC_TYPES,
    ConfigUpdatedData,
    EventRejected,
    EventType,
    NodeUpsertedData,
    PodGroupAnnotatedData,
    PodGroupReleasedData,
    PodGroupSubmittedData,
    QueueUpsertedData,
    RequeueNominatedData,
    decode_event,
    encode_event,
    new_event,
    topic_types,
)
from tests import cloudevents as ce
from tests.cloudevents import T0

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas" / "examples"


def rejected(value: bytes | None, topic: str | None = None, headers: Any = None) -> EventRejected:
    """The decoder's refusal of `value` (on `topic`, with `headers`): one line, a known kind."""
    with pytest.raises(EventRejected) as caught:
        decode_event(value, topic, headers=headers)
    error = caught.value
    assert str(error) == error.message
    assert "\n" not in error.message
    assert error.kind in REJECTION_KINDS
    return error


def submitted(**data: Any) -> dict[str, Any]:
    """podgroup.submitted of pg-1, with these data fields (whatever their names and values)."""
    base = ce.submitted("pg-1", "leaf1", ["p-0"], name="train", namespace="team-a", id="e-1")
    return ce.with_data(base, **data)


# --- every type decodes from its example ---------------------------------------------------


@pytest.mark.parametrize("event_type", sorted(EVENT_CLASSES))
def test_every_type_decodes_from_its_example(event_type: str) -> None:
    value = (EXAMPLES / f"{event_type}.json").read_bytes()
    event = decode_event(value)
    assert event.type == event_type
    assert isinstance(event, EVENT_CLASSES[event_type])
    assert event.subject == event.data.subject
    assert event.time.utcoffset() is not None


@pytest.mark.parametrize("event_type", sorted(EVENT_CLASSES))
def test_every_example_decodes_on_its_own_topic(event_type: str) -> None:
    value = (EXAMPLES / f"{event_type}.json").read_bytes()
    topic = next(topic for topic, types in TOPIC_TYPES.items() if event_type in types)
    assert decode_event(value, topic).type == event_type


def test_the_design_tree_example_builds_the_design_tree() -> None:
    lines = (EXAMPLES / "design-tree.jsonl").read_bytes().splitlines()
    events = [decode_event(line, "kai.queues") for line in lines]
    queues = {
        e.data.name: e.data.to_queue() for e in events if isinstance(e.data, QueueUpsertedData)
    }
    assert queues["leaf1"] == Queue(
        name="leaf1",
        parent="C",
        preempt_min_runtime=timedelta(seconds=300),
        reclaim_min_runtime=timedelta(0),
    )
    assert queues["C"].reclaim_min_runtime is None
    assert queues["A"].parent is None
    configs = [e.data for e in events if isinstance(e.data, ConfigUpdatedData)]
    assert configs[0].to_config() == MinRuntimeConfig()


def test_the_typed_data_is_narrowed_with_isinstance() -> None:
    event = decode_event((EXAMPLES / "podgroup.submitted.json").read_bytes(), "kai.podgroups")
    assert isinstance(event.data, PodGroupSubmittedData)
    assert event.data.to_subgroups() == (SubGroup("leader", 1), SubGroup("workers", 2))
    assert [pod.gpu for pod in event.data.pods] == [1.0, 1.0, 1.0, 0.5]
    assert event.data.annotations["kai.scheduler/expected-runtime"] == "2h"


def test_extension_attributes_are_accepted_and_ignored() -> None:
    event = decode_event(ce.wire(ce.event("queue.deleted", "q", {"name": "q"}, traceparent="00-x")))
    assert "traceparent" not in encode_event(event).decode()


def test_time_keeps_the_instant_of_any_offset() -> None:
    value = ce.wire(
        ce.event("queue.deleted", "q", {"name": "q"}, time="2026-11-21T11:00:00.123456789+01:00")
    )
    event = decode_event(value)
    assert event.time == datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
    assert b'"time":"2026-11-21T10:00:00.123456Z"' in encode_event(event)


# --- defaults --------------------------------------------------------------------------------


def test_podgroup_submitted_defaults() -> None:
    data = decode_event(ce.wire(submitted())).data
    assert isinstance(data, PodGroupSubmittedData)
    assert data.node_pool == "default"
    assert data.preemptible is True
    assert data.to_subgroups() == (SubGroup(name="default", min_available=1),)
    assert data.pods[0].sub_group == "default"
    assert data.annotations == {}


def test_config_updated_defaults_match_the_core() -> None:
    event = decode_event(ce.wire(ce.event("config.updated", "config/default", {})))
    assert isinstance(event.data, ConfigUpdatedData)
    assert event.data.node_pool == "default"
    assert event.data.to_config() == MinRuntimeConfig()
    assert event.data.default_requeue_delay == DEFAULT_REQUEUE_DELAY


def test_config_updated_null_means_the_default() -> None:
    data = {"nodePool": "gpu-a", "defaultReclaimMinRuntime": None, "reclaimResolveMethod": None}
    event = decode_event(ce.wire(ce.event("config.updated", "config/gpu-a", data)))
    assert isinstance(event.data, ConfigUpdatedData)
    assert event.data.to_config() == MinRuntimeConfig()


def test_queue_upserted_unset_fields_inherit_and_empty_parent_is_a_root() -> None:
    data = {"name": "q", "parentQueue": "", "preemptMinRuntime": None}
    event = decode_event(ce.wire(ce.event("queue.upserted", "q", data)))
    assert isinstance(event.data, QueueUpsertedData)
    assert event.data.to_queue() == Queue(name="q")


def test_queue_upserted_priority_and_resources_reach_the_core() -> None:
    data = {"name": "q", "priority": 7, "resources": {"gpu": {"quota": 0.5}}}
    event = decode_event(ce.wire(ce.event("queue.upserted", "q", data)))
    assert isinstance(event.data, QueueUpsertedData)
    queue = event.data.to_queue()
    assert queue.priority == 7
    assert queue.resources is not None
    assert queue.resources.gpu is not None
    # The wire's defaults for a setting left out: limit -1 (none), weight 1.
    assert (queue.resources.gpu.limit, queue.resources.gpu.over_quota_weight) == (-1, 1)
    assert queue.resources.cpu is None


def test_bad_queue_resources_are_rejected_with_one_line() -> None:
    for resources in (
        {"gpu": {"quota": -0.5}},
        {"gpu": {"limit": 1e16}},
        {"gpu": {"overQuotaWeight": -1}},
        {"gpu": {"quota": "4"}},
        {"gpu": 4},
    ):
        data = {"name": "q", "resources": resources}
        error = rejected(ce.wire(ce.event("queue.upserted", "q", data)))
        assert error.message.startswith("data.resources.gpu"), error.message


def test_node_defaults_and_released_all_pods() -> None:
    node = decode_event(ce.wire(ce.event("node.upserted", "n", {"name": "n", "gpu": 4}))).data
    assert isinstance(node, NodeUpsertedData)
    assert (node.node_pool, node.gpu) == ("default", 4.0)
    released = decode_event(ce.wire(ce.event("podgroup.released", "u", {"uid": "u"}))).data
    assert isinstance(released, PodGroupReleasedData)
    assert released.pods is None


def test_annotated_null_values_survive_the_round_trip() -> None:
    data = {"uid": "u", "annotations": {"a": "1", "b": None}}
    event = decode_event(ce.wire(ce.event("podgroup.annotated", "u", data)))
    assert isinstance(event.data, PodGroupAnnotatedData)
    assert event.data.annotations == {"a": "1", "b": None}
    assert decode_event(encode_event(event)) == event


def test_durations_are_written_back_canonically() -> None:
    data = {"name": "q", "preemptMinRuntime": "90m", "reclaimMinRuntime": "0"}
    event = decode_event(ce.wire(ce.event("queue.upserted", "q", data)))
    written = json.loads(encode_event(event))
    assert written["data"] == {"name": "q", "preemptMinRuntime": "1h30m", "reclaimMinRuntime": "0s"}


# --- rejections --------------------------------------------------------------------------------


def test_not_json() -> None:
    error = rejected(b"{not json")
    assert error.kind == "not_json"
    assert error.message.startswith("value is not valid JSON: ")


def test_not_utf8() -> None:
    error = rejected(b'{"id": "\xff"}')
    assert (error.kind, error.message[:25]) == ("not_json", "value is not UTF-8 text: ")


def test_a_lone_surrogate_escape_is_not_json() -> None:
    value = ce.wire(ce.event("queue.deleted", "q", {"name": "q"}, ext="\ud800"))
    assert b"\\ud800" in value
    error = rejected(value)
    assert error.kind == "not_json"
    assert error.message.startswith("value is not valid JSON: Invalid JSON: ")


def test_json_array_is_not_an_object() -> None:
    error = rejected(b"[1, 2]")
    assert error.kind == "not_json"
    assert error.message == "JSON value is an array, expected an object (a CloudEvent)"


def test_a_tombstone_is_rejected() -> None:
    assert rejected(None).kind == "not_json"


def test_missing_id() -> None:
    document = ce.event("queue.deleted", "q", {"name": "q"})
    del document["id"]
    error = rejected(ce.wire(document))
    assert error.kind == "not_cloudevent"
    assert error.message == "not a CloudEvent: required attribute 'id' is missing"


def test_wrong_specversion() -> None:
    error = rejected(ce.wire(ce.event("queue.deleted", "q", {"name": "q"}, specversion="0.3")))
    assert error.kind == "not_cloudevent"
    assert error.message == "not a CloudEvent: specversion must be '1.0', got '0.3'"


@pytest.mark.parametrize(
    ("attribute", "value"),
    [("time", "2026-11-21T10:00:00"), ("time", "yesterday"), ("source", ""), ("subject", 7)],
)
def test_bad_envelope_attributes(attribute: str, value: Any) -> None:
    document = {**ce.event("queue.deleted", "q", {"name": "q"}), attribute: value}
    error = rejected(ce.wire(document))
    assert error.kind == "not_cloudevent"
    assert error.message.startswith(f"not a CloudEvent: {attribute}: ")


def test_data_that_is_not_an_object_is_not_a_cloudevent() -> None:
    assert rejected(ce.wire(ce.event("queue.deleted", "q", ["q"]))).kind == "not_cloudevent"


def test_unknown_type() -> None:
    error = rejected(ce.wire(ce.event("queue.renamed", "q", {"name": "q"})))
    assert error.kind == "unknown_type"
    assert error.message.startswith("unknown event type 'queue.renamed' (known: queue.upserted, ")


def test_an_envelope_error_wins_over_an_unknown_type() -> None:
    document = ce.event("queue.renamed", "q", {"name": "q"}, specversion="2.0")
    assert rejected(ce.wire(document)).kind == "not_cloudevent"


def test_schema_violation_priority_high() -> None:
    error = rejected(ce.wire(submitted(priority="high")))
    assert error.kind == "schema_violation"
    assert error.message == 'data.priority: Input should be a valid integer, got "high"'


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pods": []}, "data.pods: must have at least 1 item(s), got 0"),
        ({"pods": {}}, "data.pods: must be a JSON array"),
        ({"pods": [3]}, "data.pods[0]: must be a JSON object"),
        ({"preemptible": "yes"}, 'data.preemptible: Input should be a valid boolean, got "yes"'),
        ({"subGroups": [{"name": "a", "minAvailable": -1}]}, "data.subGroups[0].minAvailable: "),
        ({"pods": [{"name": "p", "gpu": -0.5}]}, "data.pods[0].gpu: "),
        ({"pods": [{"name": "p", "gpu": "1"}]}, "data.pods[0].gpu: "),
        ({"pods": [{"name": "p"}]}, "data.pods[0].gpu: required field is missing"),
        ({"queue": ""}, "data.queue: must not be empty"),
        ({"node_pool": "x"}, "data.node_pool: unknown field (field names are camelCase"),
        ({"nodepool": "x"}, "data.nodepool: unknown field"),
        ({"annotations": {"a/b": 1}}, 'data.annotations["a/b"]: Input should be a valid string'),
    ],
)
def test_schema_violations_name_the_field(data: dict[str, Any], message: str) -> None:
    error = rejected(ce.wire(submitted(**data)))
    assert error.kind == "schema_violation"
    assert error.message.startswith(message)


def test_a_pod_in_an_undeclared_subgroup() -> None:
    data = {
        "subGroups": [{"name": "workers", "minAvailable": 1}],
        "pods": [{"name": "p-0", "subGroup": "workers", "gpu": 1}, {"name": "p-1", "gpu": 1}],
    }
    error = rejected(ce.wire(submitted(**data)))
    assert error.kind == "schema_violation"
    assert error.message == (
        "data: pods name undeclared subgroup(s) default; subGroups declares workers"
    )


def test_a_named_subgroup_needs_subgroups() -> None:
    error = rejected(ce.wire(submitted(pods=[{"name": "p", "subGroup": "workers", "gpu": 1}])))
    assert (
        error.message
        == "data: pods name undeclared subgroup(s) workers; subGroups declares default"
    )


def test_duplicate_pods_and_subgroups() -> None:
    pods = [{"name": "p", "gpu": 1}, {"name": "p", "gpu": 1}]
    assert rejected(ce.wire(submitted(pods=pods))).message == "data: duplicate pod name(s): p"
    groups = [{"name": "default"}, {"name": "default", "minAvailable": 0}]
    error = rejected(ce.wire(submitted(subGroups=groups)))
    assert error.message == "data: duplicate subgroup name(s): default"
    allocated = {"uid": "u", "pods": [{"name": "p", "node": "n"}, {"name": "p", "node": "m"}]}
    error = rejected(ce.wire(ce.event("podgroup.allocated", "u", allocated)))
    assert error.message == "data: duplicate pod name(s): p"


def test_bad_duration() -> None:
    data = {"name": "q", "reclaimMinRuntime": "1h-30m"}
    error = rejected(ce.wire(ce.event("queue.upserted", "q", data)))
    assert error.kind == "bad_duration"
    assert error.message.startswith(
        "data.reclaimMinRuntime: invalid duration '1h-30m': a sign is only allowed"
    )


@pytest.mark.parametrize("text", ["", "5", "1h2", "10x", "abc", "1H", " 1h", 5])
def test_bad_durations(text: Any) -> None:
    data = {"nodePool": "p", "defaultPreemptMinRuntime": text}
    error = rejected(ce.wire(ce.event("config.updated", "config/p", data)))
    assert error.kind == "bad_duration"
    assert error.message.startswith("data.defaultPreemptMinRuntime: ")


def test_negative_duration() -> None:
    data = {"name": "q", "preemptMinRuntime": "-5m"}
    error = rejected(ce.wire(ce.event("queue.upserted", "q", data)))
    assert error.kind == "negative_duration"
    assert error.message == (
        "data.preemptMinRuntime: invalid duration '-5m': negative durations are not allowed"
    )


def test_zero_requeue_delay_and_unknown_method() -> None:
    data = {"defaultRequeueDelay": "0s"}
    error = rejected(ce.wire(ce.event("config.updated", "config/default", data)))
    assert (error.kind, error.message) == (
        "invalid_config",
        "data.defaultRequeueDelay: must be a positive duration, got 0s",
    )
    data = {"reclaimResolveMethod": "LCA"}
    error = rejected(ce.wire(ce.event("config.updated", "config/default", data)))
    assert error.kind == "invalid_config"
    assert error.message.startswith("data.reclaimResolveMethod: Input should be 'lca' or 'queue'")


def test_a_misspelt_config_argument_is_rejected() -> None:
    data = {"defaultPreemptMinRunTime": "5m"}
    error = rejected(ce.wire(ce.event("config.updated", "config/default", data)))
    assert error.message.startswith("data.defaultPreemptMinRunTime: unknown field")


@pytest.mark.parametrize(
    ("event_type", "subject", "data", "message"),
    [
        ("queue.upserted", "other", {"name": "q"}, "subject 'other' must equal data.name ('q')"),
        ("node.deleted", "m", {"name": "n"}, "subject 'm' must equal data.name ('n')"),
        ("podgroup.deleted", "v", {"uid": "u"}, "subject 'v' must equal data.uid ('u')"),
        (
            "requeue.nominated",
            "v",
            {"uid": "u", "nominatedBy": "proportion"},
            "subject 'v' must equal data.uid ('u')",
        ),
        (
            "config.updated",
            "default",
            {},
            "subject 'default' must equal config/<data.nodePool> ('config/default')",
        ),
    ],
)
def test_subject_mismatch(event_type: str, subject: str, data: Any, message: str) -> None:
    error = rejected(ce.wire(ce.event(event_type, subject, data)))
    assert error.kind == "schema_violation"
    assert error.message == f"subject: {message}"


def test_wrong_topic() -> None:
    value = (EXAMPLES / "podgroup.allocated.json").read_bytes()
    error = rejected(value, "kai.queues")
    assert error.kind == "wrong_topic"
    assert error.message == (
        "event type 'podgroup.allocated' does not belong on topic 'kai.queues' "
        "(it carries: config.updated, queue.deleted, queue.upserted)"
    )


def test_wrong_topic_wins_over_a_data_error() -> None:
    value = ce.wire(ce.event("queue.upserted", "q", {"name": "q", "preemptMinRuntime": "-1s"}))
    assert rejected(value, "kai.nodes").kind == "wrong_topic"


def test_an_unknown_topic_is_a_configuration_error() -> None:
    value = (EXAMPLES / "queue.deleted.json").read_bytes()
    with pytest.raises(LookupError, match="carries no known event types"):
        decode_event(value, "kai.queues.v2")
    configured = topic_types({"queues": "prod.queues"})
    assert decode_event(value, "prod.queues", topic_types=configured).type == "queue.deleted"


def test_nul_characters_are_refused_before_the_store() -> None:
    value = ce.wire(ce.event("queue.deleted", "q\u0000", {"name": "q\u0000"}))
    error = rejected(value)
    assert error.kind == "schema_violation"
    assert "NUL" in error.message


def test_a_long_message_is_cut() -> None:
    error = rejected(ce.wire(ce.event("x" * 2000, "q", {})))
    assert len(error.message) <= 500
    assert error.message.endswith("...")


# --- topics ------------------------------------------------------------------------------------


def test_topics_per_contract() -> None:
    input_topic_types = {DEFAULT_TOPICS[role]: ROLE_TYPES[role] for role in INPUT_ROLES}
    assert input_topic_types == {
        "kai.queues": {"queue.upserted", "queue.deleted", "config.updated"},
        "kai.podgroups": {
            "podgroup.submitted",
            "podgroup.allocated",
            "podgroup.released",
            "podgroup.annotated",
            "podgroup.deleted",
            "requeue.abandoned",  # the evictor's: the podgroup's requeue given up
            "requeue.checkpoint",  # the evictor's: the checkpoint handshake's end
        },
        "kai.nodes": {"node.upserted", "node.deleted"},
        "kai.nominations": {"requeue.nominated"},
    }
    assert TOPIC_TYPES["kai.requeue-decisions"] == {
        "requeue.committed",
        "requeue.rolled-back",
        "requeue.skipped",
    }
    assert set(EVENT_CLASSES) == {str(t) for t in EventType}


def test_two_roles_on_one_topic_carry_both() -> None:
    merged = topic_types({"queues": "kai.all", "nodes": "kai.all"})
    assert merged["kai.all"] == ROLE_TYPES["queues"] | ROLE_TYPES["nodes"]


# --- new_event / encode_event -------------------------------------------------------------------


def test_new_event_derives_subject_and_id() -> None:
    event = new_event("requeue.nominated", {"uid": "u", "nominatedBy": "proportion"}, time=T0)
    assert event.subject == "u"
    assert len(event.id) == 36
    assert event.source == "minruntime"
    other = new_event("requeue.nominated", {"uid": "u", "nominatedBy": "proportion"}, time=T0)
    assert other.id != event.id


def test_new_event_takes_a_model_or_snake_case_keys() -> None:
    data = RequeueNominatedData(uid="u", nominated_by="expectedruntime")
    by_model = new_event("requeue.nominated", data, time=T0, id="n-1", source="s")
    by_names = new_event(
        "requeue.nominated",
        {"uid": "u", "nominated_by": "expectedruntime"},
        time=T0,
        id="n-1",
        source="s",
    )
    assert by_model == by_names
    assert decode_event(encode_event(by_model)) == by_model


def test_new_event_for_config_uses_the_pool_subject() -> None:
    event = new_event("config.updated", {"nodePool": "gpu-a"}, time=T0)
    assert event.subject == "config/gpu-a"


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda: new_event("queue.renamed", {"name": "q"}, time=T0), "unknown_type"),
        (
            lambda: new_event("queue.deleted", {"name": "q"}, time=T0, subject="p"),
            "schema_violation",
        ),
        (lambda: new_event("queue.deleted", {}, time=T0), "schema_violation"),
        (
            lambda: new_event("queue.upserted", {"name": "q", "preemptMinRuntime": "-1m"}, time=T0),
            "negative_duration",
        ),
        (
            lambda: new_event("queue.deleted", {"name": "q"}, time=datetime(2026, 1, 1)),
            "not_cloudevent",
        ),
        (
            lambda: new_event(
                "queue.deleted", RequeueNominatedData(uid="u", nominated_by="x"), time=T0
            ),
            "schema_violation",
        ),
    ],
)
def test_new_event_rejects_like_decode(call: Any, kind: str) -> None:
    with pytest.raises(EventRejected) as caught:
        call()
    assert caught.value.kind == kind


def test_new_event_reports_data_paths() -> None:
    with pytest.raises(EventRejected) as caught:
        new_event("queue.upserted", {"name": "q", "reclaimMinRuntime": "1h-30m"}, time=T0)
    assert caught.value.message.startswith("data.reclaimMinRuntime: invalid duration '1h-30m'")


def test_encode_is_compact_camel_case_utf8_with_z_times() -> None:
    data = {
        "uid": "ü-1",
        "nominatedBy": ["expectedruntime"],
        "beneficiaries": ["b"],
        "requeueNotBefore": datetime(2026, 11, 21, 12, 20, tzinfo=UTC) + timedelta(hours=1),
        "decidedAt": "2026-11-21T13:10:00+01:00",
    }
    event = new_event(
        "requeue.committed", data, time=T0, id="d-1", source="minruntime", subject="ü-1"
    )
    assert (
        encode_event(event)
        == (
            '{"specversion":"1.0","id":"d-1","source":"minruntime","type":"requeue.committed",'
            '"time":"2026-11-21T10:00:00Z","subject":"ü-1","data":{"uid":"ü-1",'
            '"nominatedBy":["expectedruntime"],"beneficiaries":["b"],'
            '"requeueNotBefore":"2026-11-21T13:20:00Z","decidedAt":"2026-11-21T12:10:00Z",'
            '"placements":[]}}'
        ).encode()
    )


def test_every_type_has_an_event_type_member() -> None:
    assert sorted(EVENT_CLASSES) == sorted(str(t) for t in EventType)
    assert isinstance(new_event(EventType.NODE_DELETED, {"name": "n"}, time=T0).type, str)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, "preemptible"),
        ({"preemptible": False}, "non-preemptible"),
        ({"preemptibility": "semi-preemptible"}, "semi-preemptible"),
        ({"preemptibility": "non-preemptible"}, "non-preemptible"),
        # Both given and agreeing is fine.
        ({"preemptible": False, "preemptibility": "non-preemptible"}, "non-preemptible"),
        ({"preemptible": True, "preemptibility": "preemptible"}, "preemptible"),
        # The flag says whether any pod may go: true for semi-preemptible (what the service's
        # own encoder writes, the flag's default included).
        ({"preemptible": True, "preemptibility": "semi-preemptible"}, "semi-preemptible"),
    ],
)
def test_preemptibility_and_the_older_flag(data: dict[str, Any], expected: str) -> None:
    event = decode_event(ce.wire(submitted(**data)))
    assert isinstance(event.data, PodGroupSubmittedData)
    assert event.data.resolved_preemptibility() == expected
    # What the service itself encodes (every field written) decodes to the same.
    again = decode_event(encode_event(event))
    assert isinstance(again.data, PodGroupSubmittedData)
    assert again.data.resolved_preemptibility() == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"preemptible": False, "preemptibility": "semi-preemptible"},
            "data: preemptible false contradicts preemptibility 'semi-preemptible'; give one of "
            "them (preemptible false means non-preemptible; true, preemptible or "
            "semi-preemptible)",
        ),
        (
            {"preemptible": True, "preemptibility": "non-preemptible"},
            "data: preemptible true contradicts preemptibility 'non-preemptible'",
        ),
        (
            {"preemptible": False, "preemptibility": "preemptible"},
            "data: preemptible false contradicts preemptibility 'preemptible'",
        ),
        (
            {"preemptibility": "sometimes"},
            "data.preemptibility: Input should be 'preemptible', 'non-preemptible' or "
            "'semi-preemptible'",
        ),
        ({"preemptibility": True}, "data.preemptibility: Input should be 'preemptible'"),
    ],
)
def test_unknown_or_contradicting_preemptibility_is_refused(
    data: dict[str, Any], message: str
) -> None:
    error = rejected(ce.wire(submitted(**data)))
    assert error.kind == "schema_violation"
    assert error.message.startswith(message)
