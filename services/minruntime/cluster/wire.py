"""A list page of pods, PodGroups or Nodes decoded to the fields the bridge keeps, and no
others.

A pod as the API server lists it is 2-3 KB of JSON: its containers' images, commands and env,
volumes, managedFields' field sets, container statuses. ``mapping.kept_pod`` keeps a few
hundred bytes of it. Decoding the whole page with ``json.loads`` builds every one of those
objects only to drop them: at 100,000 pods that was most of the bridge's CPU in a listing.
Here msgspec decodes each item straight into the shape of the API server's pod (the same
keys, the same nesting), but only with the fields below; the rest of the page is skipped in
C. ``mapping.kept_pod`` then reads it as it reads a whole pod, so what is kept is the same
(tests/unit/test_cluster_wire.py proves it on a pod with every field set).

A field typed ``object`` is decoded as whatever JSON value it holds, unchecked (as
``json.loads`` would); the mapping checks each value it reads. The fields are those
``mapping.kept_pod`` (and ``_kept_metadata``) read; one it starts to read
must be added here too, or that test fails. A page whose fields have other types than a pod's
(which the API server never sends) is decoded whole with ``json.loads``, as before: the
mapping then treats it as it always did.
"""

from __future__ import annotations

import json
from typing import TypedDict, TypeVar

import msgspec

_T = TypeVar("_T")


class _Time(TypedDict, total=False):
    time: object


class _Metadata(TypedDict, total=False):
    uid: object
    name: object
    namespace: object
    resourceVersion: object
    generation: object
    creationTimestamp: object
    deletionTimestamp: object
    deletionGracePeriodSeconds: object
    labels: object
    annotations: object
    managedFields: list[_Time] | None


class _Container(TypedDict, total=False):
    resources: object


class _Spec(TypedDict, total=False):
    nodeName: object
    containers: list[_Container] | None


class _Condition(TypedDict, total=False):
    type: object
    status: object
    lastTransitionTime: object


class _ContainerStatus(TypedDict, total=False):
    state: object


class _Status(TypedDict, total=False):
    phase: object
    reason: object
    startTime: object
    conditions: list[_Condition] | None
    containerStatuses: list[_ContainerStatus] | None


class _Pod(TypedDict, total=False):
    metadata: _Metadata | None
    spec: _Spec | None
    status: _Status | None


class _PodList(TypedDict, total=False):
    metadata: object
    items: list[_Pod | None] | None


_POD_LIST: msgspec.json.Decoder[_PodList] = msgspec.json.Decoder(_PodList)


# PodGroups (``mapping.kept_podgroup``): their metadata as a pod's and their owners, the whole
# spec; not their status nor managedFields' field sets. Nodes (``mapping.kept_node``): their
# metadata and capacity; not their images, addresses, conditions or daemon endpoints.


class _PodGroupMetadata(_Metadata, total=False):
    ownerReferences: object


class _PodGroup(TypedDict, total=False):
    metadata: _PodGroupMetadata | None
    spec: object


class _PodGroupList(TypedDict, total=False):
    metadata: object
    items: list[_PodGroup | None] | None


class _NodeStatus(TypedDict, total=False):
    capacity: object


class _Node(TypedDict, total=False):
    metadata: _Metadata | None
    status: _NodeStatus | None


class _NodeList(TypedDict, total=False):
    metadata: object
    items: list[_Node | None] | None


_PODGROUP_LIST: msgspec.json.Decoder[_PodGroupList] = msgspec.json.Decoder(_PodGroupList)
_NODE_LIST: msgspec.json.Decoder[_NodeList] = msgspec.json.Decoder(_NodeList)


def _narrow(decoder: msgspec.json.Decoder[_T], body: bytes) -> object:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError:  # not the kind's types: the whole page, as before
        return json.loads(body)
    except msgspec.DecodeError as error:  # not JSON: as json.loads says it
        raise ValueError(f"not JSON: {error}") from error


def decode_pod_list(body: bytes) -> object:
    """A list page of pods (``{"metadata", "items"}``) with each pod's kept fields only."""
    return _narrow(_POD_LIST, body)


def decode_podgroup_list(body: bytes) -> object:
    """A list page of PodGroups with each PodGroup's kept fields only."""
    return _narrow(_PODGROUP_LIST, body)


def decode_node_list(body: bytes) -> object:
    """A list page of Nodes with each Node's kept fields only."""
    return _narrow(_NODE_LIST, body)
