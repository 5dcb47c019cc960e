"""The bridge's memory of what it sent: one record per object, the value of its ledger
(``cluster.ledger``), which the next term reads back from Kafka.

A record is keyed ``<kind>/<uid>`` (``RecordKind``) and says only what the mirror needs to
send nothing twice: a digest of the content last sent (queues, nodes, the config), the shape
and annotation digests of a PodGroup's submission (or that its run was ended unseen), and per
pod which of its transitions were sent. In memory the records are plain dicts (held packed,
``cluster.packed``); on the ledger they carry the format's version (``to_json``).

Versions: 1 (no ``version`` field) and 2 (the same fields, with ``version``). A record of a
version this bridge does not know (a newer bridge's, before a rollback) reads as no record:
the object is sent again, a true duplicate (every event id names its content).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Final, TypedDict, cast

import msgspec


class RecordKind(StrEnum):
    """The kinds of object the memory has records of (the ledger key's first part)."""

    QUEUE = "queue"
    NODE = "node"
    CONFIG = "config"
    PODGROUP = "podgroup"
    POD = "pod"


class ContentRecord(TypedDict):
    """A Queue, Node or the scheduler's ConfigMap: the digest of the data last sent."""

    digest: str
    name: str


class PodGroupRecord(TypedDict, total=False):
    """A PodGroup: its submitted shape and annotation digests; or, without a shape, that a
    run this term knew nothing of was ended (``ended``: the PodGroup's resourceVersion)."""

    shape: str
    annotations: dict[str, str]
    ended: str


class PodRecord(TypedDict, total=False):
    """A pod of a PodGroup: which of its transitions were sent."""

    podgroup: str
    name: str
    submitted: bool
    allocated: bool
    released: bool
    created: str  # its creationTimestamp (a term that finds it gone matches signals after it)


Record = ContentRecord | PodGroupRecord | PodRecord

VERSION: Final = 2
"""The version ``to_json`` writes."""
READABLE: Final = frozenset({1, VERSION})
_READABLE_VERSIONS: Final = tuple(READABLE)
_VERSION_FIELD: Final = "version"
_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_DECODER: Final = msgspec.json.Decoder()


def ledger_key(kind: RecordKind, uid: str) -> str:
    return f"{kind.value}/{uid}"


def split_key(key: str) -> tuple[RecordKind, str] | None:
    """A ledger key "<kind>/<uid>" as (kind, uid); None when it is not one."""
    kind, slash, uid = key.partition("/")
    found = _KINDS.get(kind)
    return None if found is None or not slash or not uid else (found, uid)


_KINDS: Final = {kind.value: kind for kind in RecordKind}


def to_json(record: Record | None) -> bytes | None:
    """A record as the ledger's value, with its version (None: a tombstone)."""
    if record is None:
        return None
    return _ENCODER.encode({**record, _VERSION_FIELD: VERSION}).encode()


def from_json(value: bytes | None) -> Record | None:
    """A ledger value as a record (of any readable version, without its version field);
    None for a tombstone, a value that is not a JSON object, or a version not known here."""
    if value is None:
        return None
    try:
        # msgspec: a sixth of json.loads' CPU (a restart reads a record per pod); what it
        # refuses (a number beyond a float, a lone surrogate) is read by json.loads, as before.
        read = _DECODER.decode(value)
    except ValueError:
        try:
            read = json.loads(value)
        except ValueError:
            return None
    version = read.pop(_VERSION_FIELD, 1) if isinstance(read, dict) else None
    # Compared, not hashed: a version that is a list or an object reads as unknown.
    return cast(Record, read) if version in _READABLE_VERSIONS else None
