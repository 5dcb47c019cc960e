"""Pods listed from the API server's watch cache: one body, read and cut a block at a time,
every item kept once, in order; a body that cannot be read so falls back to paged lists."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from minruntime.cluster import api
from minruntime.cluster.api import (
    LIST_END,
    LIST_PAGE,
    LIST_RESTART,
    LIST_START,
    CacheListingError,
    Inbox,
    Source,
    Watcher,
    cached_pages,
)
from minruntime.cluster.mirror import Kind
from minruntime.cluster.wire import decode_pod_list
from minruntime.settings import Settings


class Body:
    """A streamed answer: read(amt) hands at most `piece` bytes at a time."""

    def __init__(self, data: bytes, piece: int) -> None:
        self.data, self.piece, self.at, self.status = data, piece, 0, 200

    def read(self, amt: int) -> bytes:
        chunk = self.data[self.at : self.at + min(amt, self.piece)]
        self.at += len(chunk)
        return chunk

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def pod(index: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{index}", "uid": f"u-{index}", "namespace": "ns",
                     "annotations": {"note": "},{\"metadata\":{ inside a string"}},
        "spec": {"nodeName": "n1", "volumes": [{"name": "v", "ephemeral": {
            "volumeClaimTemplate": {"metadata": {"labels": {"a": "b"}}}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def body(count: int) -> bytes:
    items = ",".join(json.dumps(pod(i), separators=(",", ":")) for i in range(count))
    head = '{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":['
    return (head + items + "]}\n").encode()


def source(answer: Any, calls: list[dict[str, Any]] | None = None) -> Source:
    def call(**kwargs: Any) -> Any:
        if calls is not None:
            calls.append(kwargs)
        return answer(**kwargs)

    return Source(Kind.POD, call, lambda obj: obj, decode_pod_list, from_cache=True)


@pytest.mark.parametrize("piece", [7, 1000, 1 << 20])
def test_every_pod_is_listed_once_in_order_whatever_the_reads(
    piece: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api, "CACHE_READ_BYTES", 4096)  # several blocks
    calls: list[dict[str, Any]] = []
    pages = list(cached_pages(source(lambda **_: Body(body(200), piece), calls)))
    names = [obj["metadata"]["name"] for page in pages for obj in page.objects]
    assert names == [f"p-{i}" for i in range(200)]
    assert len(pages) > 5  # cut into blocks, not the whole body at once
    assert [page.last for page in pages] == [False] * (len(pages) - 1) + [True]
    assert {page.resource_version for page in pages} == {"42"}
    assert calls == [{"resource_version": "0", "_preload_content": False}]


def test_an_empty_cluster_is_one_empty_last_page() -> None:
    empty = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}'
    [page] = cached_pages(source(lambda **_: Body(empty, 5)))
    assert (page.objects, page.resource_version, page.last) == ((), "7", True)


@pytest.mark.parametrize(
    "bad",
    [
        b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"me',
        b'{"kind":"Status","status":"Failure"}',
        b'{"metadata":{},"items":[]}',
    ],
)
def test_a_body_that_cannot_be_read_in_blocks_is_refused(bad: bytes) -> None:
    with pytest.raises(CacheListingError):
        list(cached_pages(source(lambda **_: Body(bad, 5))))


def test_the_watcher_lists_in_pages_once_the_cache_listing_failed() -> None:
    """A cut body (the API server gone mid-answer) restarts the listing in pages."""
    whole = body(3)
    paged = json.dumps({"metadata": {"resourceVersion": "9"}, "items": [pod(0), pod(1)]})
    answers = iter([Body(whole[: len(whole) // 2], 1 << 20), Body(paged.encode(), 1 << 20)])

    def answer(**kwargs: Any) -> Any:
        return next(answers)

    stop = threading.Event()
    watcher = Watcher(source(answer), Inbox(100), stop, watch_seconds=1, backoff_max=0.01)
    notes = list(watcher.pages())
    actions = [note.action for note in notes]
    assert actions[0] == LIST_START
    assert LIST_RESTART in actions
    assert actions[-2:] == [LIST_PAGE, LIST_END]
    assert [obj["metadata"]["name"] for obj in notes[-2].objects] == ["p-0", "p-1"]
    assert watcher.resource_version == "9"
    assert not watcher.from_cache


def podgroup(index: int) -> dict[str, Any]:
    """A PodGroup as the API server writes a custom resource: keys sorted, managedFields and
    ownerReferences whose entries begin as an item does ({"apiVersion":...,"kind":...)."""
    version = "scheduling.run.ai/v2alpha2"
    return {
        "apiVersion": version,
        "kind": "PodGroup",
        "metadata": {
            "managedFields": [
                {"apiVersion": version, "fieldsType": "FieldsV1", "manager": "a"},
                {"apiVersion": version, "fieldsType": "FieldsV1", "manager": "b"},
            ],
            "name": f"pg-{index}",
            "namespace": "ns",
            "ownerReferences": [
                {"apiVersion": version, "kind": "PodGroup", "name": "x", "uid": "o1"},
                {"apiVersion": "v1", "kind": "Pod", "name": "y", "uid": "o2"},
            ],
            "uid": f"g-{index}",
        },
        "spec": {"minMember": 1, "queue": "q"},
    }


def node(index: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"n-{index}", "uid": f"n-{index}", "labels": {"a": "b"}},
        "status": {"images": [{"names": ["a"], "sizeBytes": 1}, {"names": ["b"]}]},
    }


@pytest.mark.parametrize(("kind", "make"), [(Kind.POD_GROUP, podgroup), (Kind.NODE, node)])
def test_podgroups_and_nodes_are_listed_from_the_cache_cut_between_their_items(
    kind: Kind, make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bridge's own sources list PodGroups and nodes from the watch cache too, each body
    cut only between items (never inside a managedFields or ownerReferences list)."""
    monkeypatch.setattr(api, "CACHE_READ_BYTES", 700)  # a few items a block
    items = ",".join(json.dumps(make(i), separators=(",", ":")) for i in range(300))
    meta = '"metadata":{"resourceVersion":"5"}'
    if kind == Kind.POD_GROUP:  # a custom resource's list: its keys sorted, items first
        whole = f'{{"apiVersion":"v","items":[{items}],"kind":"L",{meta}}}'
    else:  # a typed list: as Go writes it, its metadata first
        whole = f'{{"kind":"L","apiVersion":"v1",{meta},"items":[{items}]}}'
    [listed] = [s for s in api.sources(object(), Settings()) if s.kind == kind]
    assert listed.from_cache
    mine = Source(kind, lambda **_: Body(whole.encode(), 1 << 20), lambda obj: obj,
                  from_cache=True, item_head=listed.item_head)  # fmt: skip
    pages = list(cached_pages(mine))
    assert [obj["metadata"]["name"] for page in pages for obj in page.objects] == [
        make(i)["metadata"]["name"] for i in range(300)
    ]
    assert len(pages) > 20
    assert pages[-1].last
    assert pages[-1].resource_version == "5"
    assert all(obj == make(i) for i, obj in enumerate(o for p in pages for o in p.objects))
