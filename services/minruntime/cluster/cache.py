"""The objects the bridge keeps, per kind, with named indexes (client-go's Indexer).

A ``Cache`` holds one kind's kept objects by uid, packed (``cluster.packed``), and keeps its
indexes up to date as objects are stored and deleted: an index function names the value an
object is found by (a pod: its PodGroup's namespace/name; a PodGroup: its own, and its
priority class). A change then costs the size of its gang, never the cluster's.

Two sorts of index: one finds every object of a value (uid -> name, in the order they came),
a ``one`` index the object that last claimed it (a PodGroup's name: its newest).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from minruntime.cluster import mapping
from minruntime.cluster.objects import ApiObject, Kept
from minruntime.cluster.packed import Packed

GroupKey = tuple[str, str]  # (namespace, PodGroup name)


@dataclass(frozen=True, slots=True)
class IndexFunc:
    """An index: the value (None: not indexed) an object is found by; ``one``: a value finds
    the one object that last claimed it, else every object of it."""

    value: Callable[[ApiObject], Hashable | None]
    one: bool = False


# The indexes' names.
PODS_BY_GROUP: Final = "pods-by-group"
PODGROUPS_BY_NAME: Final = "podgroups-by-name"
PODGROUPS_BY_CLASS: Final = "podgroups-by-class"


def group_of_pod(pod: ApiObject) -> GroupKey | None:
    """A pod's PodGroup as (namespace, name), when it names one."""
    name = mapping.pod_group_name(pod)
    return None if name is None else (mapping.namespace_of(pod), name)


def key_of_podgroup(podgroup: ApiObject) -> GroupKey:
    return (mapping.namespace_of(podgroup), mapping.name_of(podgroup))


class Cache:
    """One kind's kept objects by uid, and the named indexes over them."""

    __slots__ = ("_indexers", "_items", "_many", "_one")

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: Packed[Kept] = Packed(Kept)
        self._indexers = dict(indexers or {})
        self._many: dict[str, dict[Hashable, dict[str, str]]] = {
            name: {} for name, index in self._indexers.items() if not index.one
        }
        self._one: dict[str, dict[Hashable, str]] = {
            name: {} for name, index in self._indexers.items() if index.one
        }

    def get(self, uid: str) -> Kept | None:
        """The kept object of ``uid`` (a new copy each time), if any."""
        return self._items.get(uid)

    def __getitem__(self, uid: str) -> Kept:
        return self._items[uid]

    def __contains__(self, uid: object) -> bool:
        return uid in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def update(self, uid: str, obj: Kept) -> Kept | None:
        """Store ``obj`` (added or changed); its indexes follow. Returns what it replaced."""
        before = self._items.get(uid) if self._indexers else None
        self._items[uid] = obj
        if self._indexers:
            self._reindex(uid, before, obj)
        return before

    def delete(self, uid: str) -> Kept | None:
        """Forget the object of ``uid``; its indexes follow. Returns it, if it was kept."""
        before = self._items.pop(uid, None)
        if before is not None and self._indexers:
            self._reindex(uid, before, None)
        return before

    def drop(self, uid: str) -> None:
        """Forget the object of ``uid`` without reading it (a kind without indexes)."""
        self._items.pop(uid, None)

    def by_index(self, index: str, value: Hashable) -> Mapping[str, str]:
        """The objects an index finds for ``value``: uid -> name, in arrival order."""
        return self._many[index].get(value) or _NONE

    def one(self, index: str, value: Hashable) -> str | None:
        """The uid a ``one`` index finds for ``value`` (the last object that claimed it)."""
        return self._one[index].get(value)

    def _reindex(self, uid: str, before: ApiObject | None, after: ApiObject | None) -> None:
        for name, index in self._indexers.items():
            old = None if before is None else index.value(before)
            new = None if after is None else index.value(after)
            if index.one:
                found = self._one[name]
                if old is not None and old != new and found.get(old) == uid:
                    del found[old]
                if new is not None:
                    found[new] = uid
                continue
            values = self._many[name]
            if old is not None and old != new:
                members = values.get(old)
                if members is not None:
                    members.pop(uid, None)
                    if not members:
                        del values[old]
            if new is not None and after is not None:
                values.setdefault(new, {})[uid] = mapping.name_of(after)


_NONE: Final[Mapping[str, str]] = {}

POD_INDEXES: Final = {PODS_BY_GROUP: IndexFunc(group_of_pod)}
PODGROUP_INDEXES: Final = {
    PODGROUPS_BY_NAME: IndexFunc(key_of_podgroup, one=True),
    PODGROUPS_BY_CLASS: IndexFunc(mapping.priority_class_name),
}
