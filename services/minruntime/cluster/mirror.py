"""The bridge's view of the cluster: watch notifications in, contract events out.

Pure (no I/O; the clock is passed in and read only when the cluster gives no time). Fed by
the watchers with every ADDED / MODIFIED / DELETED object and with listings (page by page,
between ``start_listing`` and ``finish_listing``); answers the events to send, in order.

Shaped as client-go's informer: a dispatcher (this module) over

- **a cache** per kind (``cluster.cache``): the objects, as much of each as the mapping reads
  (``kept``: typed in ``cluster.objects``), with named indexes so that a change costs the size
  of its gang, never the cluster's: pods by their PodGroup's namespace/name, PodGroups by
  name and by priority class;
- **per-kind handlers**: Queues, the ConfigMap, Nodes (``cluster.handlers``); PodGroups,
  pods and PriorityClasses (``cluster.gangs``); Evict Events and the releases they attribute
  (``cluster.releases``); all sharing one ``cluster.context.Context``;
- **its memory of what was sent** (``cluster.memory``): per object one small record
  (``cluster.records``: a digest of the content last sent, which pods were submitted,
  allocated, released). The bridge
  writes the records that changed with the events that changed them, in one Kafka
  transaction, to its compacted ledger topic (``cluster.ledger``), and a new term starts from
  them: an unchanged cluster sends nothing again, a change made while no bridge watched is
  sent once, and an object that went away meanwhile is found missing from the listing.

Every event id is deterministic and names its content (``mapping.event_id``): a re-send of
the same state is a true duplicate, never a ``conflicting_duplicate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Final

from minruntime.cluster import mapping
from minruntime.cluster.context import Context, Emission, MirrorOptions, kept, log
from minruntime.cluster.evictions import Evictions, Tally, no_tally
from minruntime.cluster.gangs import Gangs
from minruntime.cluster.handlers import CONFIG_MAPS, NODES, QUEUES, ContentHandler
from minruntime.cluster.mapping import ObjectError
from minruntime.cluster.memory import Memory
from minruntime.cluster.objects import Action, ApiObject, Kept, Kind
from minruntime.cluster.records import Record, RecordKind, split_key
from minruntime.cluster.releases import Releases
from minruntime.core import format_rfc3339

__all__ = [
    "ADDED", "DELETED", "MODIFIED", "Action", "ClusterMirror", "Emission", "Kept", "Kind",
    "MirrorOptions", "Record", "kept", "split_key",
]  # fmt: skip

ADDED: Final = Action.ADDED
MODIFIED: Final = Action.MODIFIED
DELETED: Final = Action.DELETED

_ACTIONS: Final = {action.value: action for action in Action}  # anything else: a change

Handler = Callable[[Action, ApiObject, str], list[Emission]]
"""A kind's handler: the events one notification of one of its objects causes."""

# The memory's record kind of each watched kind that has one.
_MEMORY_OF: Final[Mapping[Kind, RecordKind]] = {
    Kind.QUEUE: RecordKind.QUEUE,
    Kind.NODE: RecordKind.NODE,
    Kind.POD_GROUP: RecordKind.PODGROUP,
    Kind.POD: RecordKind.POD,
}


class ClusterMirror:
    """Turns watch notifications into contract events (see the module docstring)."""

    def __init__(
        self,
        options: MirrorOptions,
        clock: Callable[[], datetime],
        memory: Mapping[str, Mapping[str, object]] | None = None,
        *,
        tally: Tally = no_tally,
        released: Callable[[str], None] = lambda attribution: None,
        ignored: Callable[[str], None] = lambda value: None,
    ) -> None:
        self.evictions = Evictions(options.eviction_window, clock, tally)
        self._memory = Memory(memory)
        self._ctx = Context(options, clock, self._memory, self.evictions, released, ignored)
        self._releases = Releases(self._ctx)
        self._gangs = Gangs(self._ctx, self._releases)
        self._handlers: Mapping[Kind, Handler] = {
            Kind.PRIORITY_CLASS: self._gangs.priority_class,
            Kind.CONFIG_MAP: ContentHandler(self._ctx, CONFIG_MAPS),
            Kind.QUEUE: ContentHandler(self._ctx, QUEUES),
            Kind.NODE: ContentHandler(self._ctx, NODES),
            Kind.POD_GROUP: self._gangs.podgroup,
            Kind.EVENT: self._releases.event,
            Kind.POD: self._gangs.pod,
        }
        # A listing in progress: the uids seen per kind.
        self._present: dict[Kind, set[str]] = {}

    def observe(self, kind: Kind, action: str, obj: ApiObject) -> list[Emission]:
        """The events one watch notification causes (often none)."""
        try:
            uid = mapping.uid_of(obj)
        except ObjectError as exc:
            log.warning("ignored %s: %s", kind.value, exc)
            return []
        objects = self._ctx.objects[kind]
        if action == DELETED:
            objects.delete(uid)
        else:
            obj = kept(kind, obj, self._ctx.options)
            objects.update(uid, obj)
        try:
            return self._handlers[kind](_ACTIONS.get(action, MODIFIED), obj, uid)
        except mapping.UNMAPPABLE as exc:
            log.warning("cannot map %s %s: %s", kind.value, mapping.name_of(obj), exc)
            return []

    def start_listing(self, kinds: Iterable[Kind]) -> None:
        """A listing of ``kinds`` begins (a term's first, or a relist after 410 Gone).

        Until ``finish_listing``, podgroups are synced once at the end rather than on every
        object: a first listing submits each gang once, with all its pods.
        """
        for kind in kinds:
            self._present[kind] = set()
        if self._ctx.deferred is None:
            self._ctx.deferred = set()

    def restart_listing(self, kind: Kind) -> None:
        """The listing of ``kind`` starts over (an expired continue token): forget what it saw."""
        self._present[kind] = set()

    def listed(self, kind: Kind, objs: Iterable[ApiObject]) -> list[Emission]:
        present = self._present.setdefault(kind, set())
        emissions: list[Emission] = []
        for obj in objs:
            uid = mapping.metadata(obj).get("uid")
            if isinstance(uid, str):
                present.add(uid)
            emissions += self.observe(kind, MODIFIED, obj)
        return emissions

    def finish_listing(self, kinds: Iterable[Kind]) -> Iterator[Emission]:
        """End the listing of ``kinds``: what was known and not listed went away unseen.

        Their deletion was not seen, so its time is the bridge's clock now. When no listing
        is left in progress, every podgroup the listing touched is synced (lazily: the caller
        sends the events in chunks while they are made).
        """
        for kind in kinds:
            present = self._present.pop(kind, set())
            yield from self._gone(kind, present)
        if self._present or self._ctx.deferred is None:
            return
        deferred, self._ctx.deferred = self._ctx.deferred, None
        for uid in sorted(deferred):
            fresh = uid not in self._memory.podgroups
            yield from self._gangs.sync(uid)
            if fresh:
                yield from self._gangs.unseen_end_of_run(uid)

    def list_all(self, listing: Mapping[Kind, Iterable[ApiObject]]) -> Iterator[Emission]:
        """Whole listings of several kinds, in the mapping's order, as a term's first listing
        is fed (every kind opened first, so each podgroup is synced once, at the end)."""
        kinds = list(listing)
        self.start_listing(kinds)
        for kind in kinds:
            yield from self.listed(kind, listing[kind])
            yield from self.finish_listing([kind])

    def due(self) -> list[Emission]:
        """The held releases whose window has passed, sent without a PodGroup signal."""
        return self._releases.due()

    def memory(self) -> dict[str, Record]:
        """Every record of what was sent, by ledger key."""
        return self._memory.all()

    def take_changes(self) -> dict[str, Record | None]:
        """The records changed since the last call (None: forgotten), by ledger key."""
        return self._memory.changes()

    # -- deletions nobody saw --------------------------------------------------------------

    def _gone(self, kind: Kind, present: set[str]) -> Iterator[Emission]:
        objects = self._ctx.objects[kind]
        memory_kind = _MEMORY_OF.get(kind)
        known = set(objects)
        if memory_kind is not None:
            known |= set(self._memory.of(memory_kind))
        for uid in sorted(known - present):
            obj: ApiObject | None = objects.get(uid)
            if not obj:  # known only from memory: a stand-in with its uid and name
                record = self._memory.of(_MEMORY_OF[kind]).get(uid) or {}
                obj = {"metadata": {"uid": uid, "name": str(record.get("name") or "")}}
            meta = dict(mapping.metadata(obj))
            meta.setdefault("deletionTimestamp", format_rfc3339(self._ctx.clock()))
            self._ctx.unseen = True
            try:
                emissions = self.observe(kind, DELETED, {**obj, "metadata": meta})
            finally:
                self._ctx.unseen = False
            yield from emissions
