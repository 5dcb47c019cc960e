"""The mirror's memory of what it sent: the ledger's records (``cluster.records``) by kind,
held packed, and which of them changed since the bridge last wrote the ledger."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from minruntime.cluster.packed import Packed
from minruntime.cluster.records import (
    ContentRecord,
    PodGroupRecord,
    PodRecord,
    Record,
    RecordKind,
    ledger_key,
    split_key,
)

R = TypeVar("R", ContentRecord, PodGroupRecord, PodRecord)


class Records(Generic[R]):
    """One kind's records by uid; each change is noted for the ledger (``Memory.changes``)."""

    __slots__ = ("_changed", "_items", "_prefix")

    def __init__(self, kind: RecordKind, changed: set[str]) -> None:
        self._prefix = ledger_key(kind, "")  # "<kind>/": a ledger key is it + the uid
        self._items: Packed[R] = Packed()
        self._changed = changed

    def get(self, uid: str) -> R | None:
        """The record of ``uid`` (a new copy each time), if any."""
        return self._items.get(uid)

    def __contains__(self, uid: object) -> bool:
        return uid in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def put(self, uid: str, record: R) -> None:
        """Remember ``record`` (the ledger writes it with the events that changed it)."""
        self._items[uid] = record
        self._changed.add(self._prefix + uid)

    def forget(self, uid: str) -> R | None:
        """Forget the record of ``uid`` (a tombstone on the ledger); returns it, if any."""
        record = self._items.pop(uid, None)
        if record is not None:
            self._changed.add(self._prefix + uid)
        return record

    def items(self) -> Iterator[tuple[str, R]]:
        return ((uid, self._items[uid]) for uid in self._items)

    def load(self, uid: str, item: bytes | Mapping[str, object]) -> None:
        """Take over a record as read from the ledger (packed, or a mapping): not a change."""
        if isinstance(item, bytes):
            self._items.put_packed(uid, item)
        else:
            self._items[uid] = dict(item)  # type: ignore[assignment]  # a ledger record


KindRecords = Records[ContentRecord] | Records[PodGroupRecord] | Records[PodRecord]


class Memory:
    """Every kind's records (see the module docstring)."""

    __slots__ = ("_by_kind", "_changed", "configs", "nodes", "podgroups", "pods", "queues")

    def __init__(self, ledger: Mapping[str, Mapping[str, object]] | None = None) -> None:
        self._changed: set[str] = set()
        self.queues = Records[ContentRecord](RecordKind.QUEUE, self._changed)
        self.nodes = Records[ContentRecord](RecordKind.NODE, self._changed)
        self.configs = Records[ContentRecord](RecordKind.CONFIG, self._changed)
        self.podgroups = Records[PodGroupRecord](RecordKind.PODGROUP, self._changed)
        self.pods = Records[PodRecord](RecordKind.POD, self._changed)
        self._by_kind: dict[RecordKind, KindRecords] = {
            RecordKind.QUEUE: self.queues,
            RecordKind.NODE: self.nodes,
            RecordKind.CONFIG: self.configs,
            RecordKind.PODGROUP: self.podgroups,
            RecordKind.POD: self.pods,
        }  # fmt: skip
        items = ledger.packed_items() if isinstance(ledger, Packed) else (ledger or {}).items()
        for key, item in items:  # as read from the ledger: moved, not unpacked
            parts = split_key(key)
            if parts is not None:
                self._by_kind[parts[0]].load(parts[1], item)

    def of(self, kind: RecordKind) -> KindRecords:
        return self._by_kind[kind]

    def all(self) -> dict[str, Record]:
        return {
            ledger_key(kind, uid): record
            for kind, records in self._by_kind.items()
            for uid, record in records.items()
        }

    def changes(self) -> dict[str, Record | None]:
        """The records changed since the last call (None: forgotten), by ledger key."""
        found: dict[str, Record | None] = {}
        for key in sorted(self._changed):
            parts = split_key(key)
            if parts is not None:
                found[key] = self._by_kind[parts[0]].get(parts[1])
        self._changed.clear()
        return found
