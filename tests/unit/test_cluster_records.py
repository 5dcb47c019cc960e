"""The ledger's records: versioned, read back from every version written, and the cache's
named indexes (cluster.records, cluster.cache)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.cluster.cache import (
    POD_INDEXES,
    PODGROUP_INDEXES,
    PODGROUPS_BY_CLASS,
    PODGROUPS_BY_NAME,
    PODS_BY_GROUP,
    Cache,
)
from minruntime.cluster.mirror import ClusterMirror, Kept, MirrorOptions
from minruntime.cluster.packed import Packed
from minruntime.cluster.records import (
    VERSION,
    Record,
    RecordKind,
    from_json,
    ledger_key,
    split_key,
    to_json,
)
from tests.unit.test_cluster_mirror import clock, cluster, listing, pod, podgroup

# What a bridge of version 1 wrote (cluster.ledger's encode_record, before records had a
# version): sorted keys, no spaces, no version field.
V1_POD = b'{"allocated":true,"created":"2026-11-24T10:00:00Z","name":"train-0","podgroup":"pg-1","released":false,"submitted":true}'  # noqa: E501
V1_PODGROUP = b'{"annotations":{"a":"0123456789abcdef"},"shape":"fedcba9876543210"}'
V1_QUEUE = b'{"digest":"0011223344556677","name":"research"}'


def test_a_version_1_record_without_a_version_field_is_read() -> None:
    assert from_json(V1_POD) == {
        "allocated": True,
        "created": "2026-11-24T10:00:00Z",
        "name": "train-0",
        "podgroup": "pg-1",
        "released": False,
        "submitted": True,
    }
    assert from_json(V1_PODGROUP) == {
        "annotations": {"a": "0123456789abcdef"},
        "shape": "fedcba9876543210",
    }
    assert from_json(V1_QUEUE) == {"digest": "0011223344556677", "name": "research"}


def test_a_record_is_written_with_its_version_and_read_back_equal() -> None:
    record: Record = {"podgroup": "pg-1", "name": "train-0", "submitted": True}
    written = to_json(record)
    assert written is not None
    assert json.loads(written)["version"] == VERSION == 2
    assert from_json(written) == record
    assert to_json(None) is None
    assert from_json(None) is None


def test_a_record_of_an_unknown_version_or_shape_reads_as_none() -> None:
    assert from_json(b'{"version":3,"digest":"x","name":"q"}') is None  # a newer bridge's
    assert from_json(b'"a string"') is None
    assert from_json(b"not json") is None


def test_ledger_keys_name_a_kind_and_a_uid() -> None:
    assert ledger_key(RecordKind.POD, "p-0") == "pod/p-0"
    assert split_key("pod/p-0") == (RecordKind.POD, "p-0")
    assert split_key("meta") is None
    assert split_key("other/p-0") is None
    assert split_key("pod/") is None


def test_a_term_that_reads_a_version_1_ledger_sends_nothing_for_an_unchanged_cluster() -> None:
    first = ClusterMirror(MirrorOptions(), clock)
    listing(first, cluster())
    # The ledger as a version-1 bridge wrote it, read back as `read_ledger` does.
    ledger: Packed[Record] = Packed()
    for key, record in first.memory().items():
        v1 = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        read = from_json(v1)
        assert read is not None
        ledger[key] = read
    assert listing(ClusterMirror(MirrorOptions(), clock, ledger), cluster()) == []


def test_the_cache_finds_pods_by_group_and_podgroups_by_name_and_class() -> None:
    pods = Cache(POD_INDEXES)
    pods.update("p-0", Kept(pod("train-0", "p-0", group="train")))
    pods.update("p-1", Kept(pod("train-1", "p-1", group="train")))
    pods.update("p-2", Kept(pod("eval-0", "p-2", group="eval")))
    assert dict(pods.by_index(PODS_BY_GROUP, ("team-a", "train"))) == {
        "p-0": "train-0",
        "p-1": "train-1",
    }
    pods.update("p-1", Kept(pod("train-1", "p-1", group="eval")))  # moved to another group
    assert list(pods.by_index(PODS_BY_GROUP, ("team-a", "train"))) == ["p-0"]
    assert set(pods.by_index(PODS_BY_GROUP, ("team-a", "eval"))) == {"p-1", "p-2"}
    pods.delete("p-0")
    assert not pods.by_index(PODS_BY_GROUP, ("team-a", "train"))
    assert "p-0" not in pods
    assert len(pods) == 2

    groups = Cache(PODGROUP_INDEXES)
    old = podgroup("train", "pg-1")
    old["spec"]["priorityClassName"] = "high"
    groups.update("pg-1", Kept(old))
    groups.update("pg-2", Kept(podgroup("train", "pg-2")))  # made again: the newest wins
    assert groups.one(PODGROUPS_BY_NAME, ("team-a", "train")) == "pg-2"
    assert list(groups.by_index(PODGROUPS_BY_CLASS, "high")) == ["pg-1"]
    groups.delete("pg-1")  # the older one's deletion leaves the newer one found
    assert groups.one(PODGROUPS_BY_NAME, ("team-a", "train")) == "pg-2"
    assert not groups.by_index(PODGROUPS_BY_CLASS, "high")
    groups.delete("pg-2")
    assert groups.one(PODGROUPS_BY_NAME, ("team-a", "train")) is None


def _read_as_json_loads(value: bytes) -> object:
    """``from_json`` as it read with json.loads alone."""
    try:
        read = json.loads(value)
    except ValueError:
        return None
    version = read.pop("version", 1) if isinstance(read, dict) else None
    return read if version in (1, 2) else None


_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
        st.text(max_size=6), st.sampled_from([1, 2, 3, "2", 1.0, 2**70]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["version", "digest", "name", "shape", "x"]), inner,
                        max_size=4),
    ),
    max_leaves=10,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    value=_VALUES,
    raw=st.sampled_from(
        [None, b"1e400", b'{"name":"\\ud800","version":2}', b'{"a":1,"a":2}', b"{", b"NaN",
         b'{"digest":Infinity}', b"  {}  ", "{\"name\":\"caf\u00e9\"}".encode()]
    ),
)  # fmt: skip
def test_a_record_reads_as_json_loads_reads_it(value: object, raw: bytes | None) -> None:
    encoded = json.dumps(value).encode() if raw is None else raw
    assert from_json(encoded) == _read_as_json_loads(encoded)
