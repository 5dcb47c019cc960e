"""The Kubernetes API, as the bridge and the evictor use it: connect, list, watch, as plain dicts.

Objects stay the API server's JSON (dicts), never the client's models: the mapping reads the
same fields whatever the client version, and custom resources need no generated classes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, TypeVar

from minruntime.cluster.evictions import EVICT_EVENT_SELECTOR
from minruntime.cluster.mirror import Kind, MirrorOptions, kept
from minruntime.cluster.objects import ApiObject
from minruntime.cluster.transient import transient
from minruntime.cluster.wire import decode_node_list, decode_pod_list, decode_podgroup_list
from minruntime.errors import UserError
from minruntime.retry import Outage, retry
from minruntime.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

KAI_GROUP: Final = "scheduling.run.ai"
QUEUE_VERSION: Final = "v2"
PODGROUP_VERSION: Final = "v2alpha2"
HTTP_GONE: Final = 410


class KubeConfigError(UserError):
    """No way to reach a Kubernetes API server was configured."""


def api_client(settings: Settings) -> Any:
    """An ApiClient: $KUBECONFIG, else the in-cluster service account, else the local stack's."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    named = os.environ.get("KUBECONFIG")
    try:
        if named:
            return config.new_client_from_config(config_file=named.split(os.pathsep)[0])
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        local = Path(settings.kube_kubeconfig)
        if not local.is_file():
            raise KubeConfigError(
                "no Kubernetes API server: set KUBECONFIG, run inside a cluster, "
                "or start the local one with `minruntime stack up --kube`"
            )
        return config.new_client_from_config(config_file=str(local))
    except (ConfigException, OSError, ValueError) as exc:
        where = named or "the in-cluster service account"
        raise KubeConfigError(f"cannot use {where}: {' '.join(str(exc).split())}") from exc


def annotate_podgroup(
    custom: Any, namespace: str, name: str, annotations: Mapping[str, str]
) -> None:
    """Merge ``annotations`` into the PodGroup's (a merge patch: others' stay), through the
    client's CustomObjectsApi ``custom``."""
    body = {"metadata": {"annotations": dict(annotations)}}
    custom.patch_namespaced_custom_object(
        KAI_GROUP, PODGROUP_VERSION, namespace, "podgroups", name, body
    )


def is_gone(error: BaseException) -> bool:
    """A 410 Gone: the resourceVersion is too old to watch from; relist."""
    return getattr(error, "status", None) == HTTP_GONE


def read_json(response: Any, decode: Callable[[bytes], Any] = json.loads) -> Any:
    """The JSON body of a call made with _preload_content=False (an error status raises),
    decoded by ``decode``."""
    raise_for_status(response)
    return decode(response.data)


def raise_for_status(response: Any) -> None:
    """With _preload_content=False the client does not raise for an error status: do it."""
    from kubernetes.client.exceptions import ApiException

    status = getattr(response, "status", 200)
    if isinstance(status, int) and not 200 <= status <= 299:
        raise ApiException(status=status, reason=getattr(response, "reason", None))


@dataclass(frozen=True)
class Source:
    """One watched kind, the list call that lists and watches it, what to keep of each
    object (``mirror.kept``: only the fields the mapping reads), and how a list page is
    decoded (pods: only the fields kept, ``cluster.wire``)."""

    kind: Kind
    call: Callable[..., Any]
    keep: Callable[[ApiObject], ApiObject] = dict
    decode: Callable[[bytes], Any] = json.loads
    # Listed by the bridge from the API server's watch cache (``cached_pages``): pods,
    # nodes, PodGroups.
    from_cache: bool = False
    # How each item of the cache's list begins (``cached_pages`` cuts the body before it).
    item_head: bytes = b'{"metadata":{'


def mirror_options(settings: Settings) -> MirrorOptions:
    return MirrorOptions(
        node_pool_label=settings.kube_node_pool_label,
        config_node_pool=settings.kube_scheduler_node_pool,
        eviction_window=timedelta(seconds=settings.kube_eviction_window_seconds),
        eviction_components=settings.kube_eviction_components_resolved,
    )


# The client's API classes ``sources`` makes. This client's are pydantic models: importing
# them builds their validators, half a second of CPU (CoreV1Api alone 0.5 s) after the Lease
# is taken, cold start or restart alike.
_SOURCE_APIS: Final = ("CoreV1Api", "CustomObjectsApi", "SchedulingV1Api")


def preload_sources() -> threading.Thread:
    """Import the API classes ``sources`` uses on a thread of their own, started before the
    Lease: the import runs while the bridge waits (for the Lease, Kafka, the ledger's
    fetches) instead of after the ledger is read. ``sources`` imports them as before (a
    module's import lock makes it wait for this thread's, never import twice)."""

    def load() -> None:
        from kubernetes import client as k8s

        for name in _SOURCE_APIS:
            getattr(k8s, name)

    thread = threading.Thread(target=load, daemon=True, name="preload-sources")
    thread.start()
    return thread


def sources(client: Any, settings: Settings) -> list[Source]:
    """What the bridge watches, in the order of the first listing (classes before podgroups).

    Pods are narrowed to KAI's scheduler (``MINRUNTIME_KUBE_SCHEDULER_NAME``, a field
    selector the API server applies): no other pod can hold a podgroup's GPUs.
    """
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(client)
    custom = k8s.CustomObjectsApi(client)
    scheduling = k8s.SchedulingV1Api(client)
    namespace, _, name = settings.kube_scheduler_config.partition("/")
    options = mirror_options(settings)
    pods = core.list_pod_for_all_namespaces
    if settings.kube_scheduler_name:
        selector = f"spec.schedulerName={settings.kube_scheduler_name}"
        pods = functools.partial(pods, field_selector=selector)
    kai = functools.partial(custom.list_cluster_custom_object, KAI_GROUP)
    calls: dict[Kind, Callable[..., Any]] = {
        Kind.PRIORITY_CLASS: scheduling.list_priority_class,
        Kind.CONFIG_MAP: functools.partial(
            core.list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}"
        ),
        Kind.QUEUE: functools.partial(kai, QUEUE_VERSION, "queues"),
        Kind.NODE: core.list_node,
        Kind.POD_GROUP: functools.partial(kai, PODGROUP_VERSION, "podgroups"),
        # After the PodGroups (an Event names its evictor's), before the pods (whose
        # deletions its signals attribute, also those gone while no bridge watched).
        Kind.EVENT: functools.partial(
            core.list_event_for_all_namespaces, field_selector=EVICT_EVENT_SELECTOR
        ),
        Kind.POD: pods,
    }
    return [
        Source(
            kind,
            call,
            functools.partial(kept, kind, options=options),
            _DECODERS.get(kind, json.loads),
            from_cache=kind in _FROM_CACHE,
            item_head=_FROM_CACHE.get(kind, b""),
        )
        for kind, call in calls.items()
    ]


# How a list page of a kind is decoded: to the fields the bridge keeps (``cluster.wire``).
_DECODERS: Final[Mapping[Kind, Callable[[bytes], Any]]] = {
    Kind.POD: decode_pod_list,
    Kind.POD_GROUP: decode_podgroup_list,
    Kind.NODE: decode_node_list,
}


# The kinds listed from the watch cache (the large ones), and how each item of their list
# begins as the API server writes it: a built-in type's fields in Go's order (metadata first),
# a custom resource's keys sorted (apiVersion, kind, metadata: the list's own version).
_FROM_CACHE: Final[Mapping[Kind, bytes]] = {
    Kind.NODE: b'{"metadata":{',
    Kind.POD_GROUP: (
        f'{{"apiVersion":"{KAI_GROUP}/{PODGROUP_VERSION}","kind":"PodGroup","metadata":{{'
    ).encode(),
    Kind.POD: b'{"metadata":{',
}


@dataclass(frozen=True)
class Notification:
    """What a watcher hands the bridge: one watch event, or a part of a listing.

    A listing is LIST_START, LIST_PAGE* (the kept objects of one page), LIST_END; a
    LIST_RESTART in between means the listing started over (an expired continue token).
    """

    kind: Kind
    action: str  # ADDED | MODIFIED | DELETED | LIST_START | LIST_PAGE | LIST_RESTART | LIST_END
    objects: tuple[ApiObject, ...] = ()


LIST_START: Final = "LIST_START"
LIST_PAGE: Final = "LIST_PAGE"
LIST_RESTART: Final = "LIST_RESTART"
LIST_END: Final = "LIST_END"
WATCH_ACTIONS: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})


class ListingExpiredError(Exception):
    """A continue token expired (410 Gone) mid-listing: the listing starts over."""


@dataclass(frozen=True)
class Page:
    """One page of a listing: the kept objects, the list's resourceVersion, and whether it is
    the last page."""

    objects: tuple[ApiObject, ...]
    resource_version: str
    last: bool


def list_pages(source: Source, page_size: int) -> Iterator[Page]:
    """A kind's objects, page by page (``limit``/``continue``), as client-go's pager lists.

    Each page is parsed and reduced to what is kept before the next is asked for, so memory
    holds one page of whole objects at a time. The list is a consistent read (no
    ``resourceVersion``): a ``resourceVersion=0`` read from the watch cache would ignore the
    limit and answer the whole cluster in one body. A continue token that has expired (410
    Gone: the listing took longer than etcd keeps the snapshot) raises ListingExpiredError.
    """
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        try:
            body = read_json(source.call(**kwargs), source.decode)
        except Exception as error:
            if token and is_gone(error):
                raise ListingExpiredError(f"{source.kind}: continue token expired") from error
            raise
        meta = body.get("metadata") or {}
        items = body.get("items") or []
        del body
        objects = tuple(source.keep(item) for item in items if isinstance(item, Mapping))
        del items
        token = meta.get("continue") or None
        yield Page(objects, str(meta.get("resourceVersion") or ""), token is None)
        if token is None:
            return


# A listing from the watch cache is read and decoded this many bytes at a time (a page).
CACHE_READ_BYTES: Final = 1 << 20
CACHE_READ_AHEAD: Final = 8  # blocks read ahead of the decoding, at most
_ITEMS: Final = b'"items":['
# Between two items: "}," and how an item begins (``Source.item_head``: a typed list's item
# (pods, nodes) begins with its metadata, as Go writes it; a PodGroup with its apiVersion and
# kind). Inside an item the bytes can only be a nested object's (never a string's: its quotes
# are escaped), and a block cut there is not JSON: refused, never misread.
_ITEM_SEPARATOR: Final = b"},"
_HEAD_LIMIT: Final = 64 * 1024


class CacheListingError(Exception):
    """A listing from the watch cache that cannot be read in blocks: list in pages instead."""


def cached_pages(source: Source) -> Iterator[Page]:
    """A kind's objects from the API server's watch cache (``resourceVersion=0``), as
    client-go's reflectors list: no etcd read, a quarter of the API server's work of a paged
    consistent list (docs/benchmarks.md, "The bridge at 100,000 pods").

    The cache ignores ``limit``: the answer is the whole kind in one body (250 MB at 100,000
    pods). It is read ``CACHE_READ_BYTES`` at a time and cut between items, each block
    decoded and kept as a page: memory holds one block, never the body. Its resourceVersion
    may lag etcd's by the cache's delay; the watch resumes from it, so what changed since is
    watched (as an informer does). A body that cannot be cut so raises CacheListingError.
    """
    between = _ITEM_SEPARATOR + source.item_head
    response = source.call(resource_version="0", _preload_content=False)
    try:
        raise_for_status(response)
        buffer = b""
        head: bytes | None = None  # the list's keys before its items
        version = ""  # the list's resourceVersion, when its head has it (a typed list)
        # Read on a thread of its own, ahead of the decoding: the server writes while we decode.
        read = iter(functools.partial(response.read, CACHE_READ_BYTES), b"")
        for chunk in prefetched(read, CACHE_READ_AHEAD):
            buffer += chunk
            if head is None:
                at = buffer.find(_ITEMS)
                if at < 0:
                    if len(buffer) > _HEAD_LIMIT:
                        raise CacheListingError(f"{source.kind}: no items in the cache's list")
                    continue
                head, buffer = buffer[:at], buffer[at + len(_ITEMS) :]
                with contextlib.suppress(CacheListingError):
                    version = _list_version(source.kind, _closed(head))
            cut = buffer.rfind(between)
            if cut >= 0:
                block, buffer = buffer[: cut + 1], buffer[cut + 2 :]
                yield Page(_block(source, block), version, False)
        if head is None:
            raise CacheListingError(f"{source.kind}: the cache's list ended early")
        last, version = _list_end(source.kind, head, buffer.rstrip())
        yield Page(_block(source, last) if last else (), version, True)
    finally:
        response.close()
        response.release_conn()


# After a custom resource list's items: its other keys, sorted (``kind``, ``metadata``).
_AFTER_ITEMS: Final = b'],"kind":'


def _list_end(kind: Kind, head: bytes, tail: bytes) -> tuple[bytes, str]:
    """The last items of a cache's list and its resourceVersion: in its head for a typed
    list (``{"kind":..,"metadata":{..},"items":[``, the tail ``]}``), in its tail for a custom
    resource's (``{"apiVersion":..,"items":[``, the tail ``],"kind":..,"metadata":{..}}``)."""
    if tail.endswith(b"]}"):
        return tail[:-2], _list_version(kind, _closed(head))
    at = tail.rfind(_AFTER_ITEMS)
    if at < 0 or not tail.endswith(b"}"):
        raise CacheListingError(f"{kind}: the cache's list ended early")
    return tail[:at], _list_version(kind, b"{" + tail[at + 2 :])


def _closed(head: bytes) -> bytes:
    """A list's head (``{"kind":..,"metadata":{..},``) as a JSON object."""
    return head.rstrip().removesuffix(b",") + b"}"


def _list_version(kind: Kind, keys: bytes) -> str:
    """The list's resourceVersion, from its keys other than the items (a JSON object)."""
    try:
        meta = json.loads(keys).get("metadata") or {}
    except (ValueError, AttributeError) as error:
        raise CacheListingError(f"{kind}: the cache's list has no readable head") from error
    version = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
    if not version:
        raise CacheListingError(f"{kind}: the cache's list has no resourceVersion")
    return version


def _block(source: Source, block: bytes) -> tuple[ApiObject, ...]:
    """The kept objects of a block of whole items (cut by ``cached_pages``)."""
    try:
        items = source.decode(b'{"items":[' + block + b"]}").get("items") or []
    except ValueError as error:
        raise CacheListingError(f"{source.kind}: a block of the cache's list: {error}") from error
    return tuple(source.keep(item) for item in items if isinstance(item, Mapping))


# Pages a listing fetches ahead of the one being folded (each at most a page of kept objects).
PREFETCH_PAGES: Final = 2
_DONE: Final = object()


def prefetched(pages: Iterator[T], depth: int = PREFETCH_PAGES) -> Iterator[T]:
    """``pages`` produced on a thread of their own, up to ``depth`` ahead of the consumer.

    The API server makes the next page (and the socket read waits for it) while the consumer
    folds this one: the two overlap instead of taking turns. An error of the producer is
    raised here, in order; closing this iterator stops the producer at its next page.
    """
    ready: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(depth)
    stop = threading.Event()

    def put(item: Any, error: BaseException | None = None) -> bool:
        while not stop.is_set():
            try:
                ready.put((item, error), timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for page in pages:
                if not put(page):
                    return
        except BaseException as error:
            put(None, error)
        else:
            put(_DONE)
        finally:
            close = getattr(pages, "close", None)
            if close is not None:
                close()

    threading.Thread(target=produce, daemon=True, name="listing").start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()


def list_all(source: Source, page_size: int = 500) -> tuple[list[ApiObject], str]:
    """Every (kept) object of the kind and the list's resourceVersion, paged underneath."""
    while True:
        objects: list[ApiObject] = []
        try:
            for page in list_pages(source, page_size):
                objects.extend(page.objects)
                if page.last:
                    return objects, page.resource_version
        except ListingExpiredError:
            continue


class Inbox:
    """The notifications waiting for the bridge, bounded by the objects they hold.

    A put waits while the inbox holds ``limit`` objects or more (a listing's page counts its
    objects, a watch event one): watchers wait for a bridge that cannot send (Kafka away),
    and memory stays bounded whatever the page size.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: deque[Notification] = deque()
        self._held = 0
        self._lock = threading.Condition()

    def put(self, note: Notification, stop: threading.Event) -> bool:
        """Add ``note`` once there is room; False when ``stop`` was set while waiting."""
        weight = max(len(note.objects), 1)
        with self._lock:
            while self._held and self._held + weight > self._limit:
                if stop.is_set():
                    return False
                self._lock.wait(0.2)
            self._items.append(note)
            self._held += weight
            self._lock.notify_all()
        return True

    def take(self, wait: float, most: int) -> list[Notification]:
        """Up to ``most`` objects' worth of notifications (at least one when any arrives
        within ``wait`` seconds)."""
        with self._lock:
            if not self._items:
                self._lock.wait(wait)
            taken: list[Notification] = []
            weight = 0
            while self._items and (not taken or weight + len(self._items[0].objects) <= most):
                note = self._items.popleft()
                weight += max(len(note.objects), 1)
                taken.append(note)
            self._held -= weight
            self._lock.notify_all()
            return taken


@dataclass(eq=False)
class Watcher:
    """Lists, then watches from the list's resourceVersion; relists on 410 Gone.

    Runs in its own thread (the client is blocking) and puts Notifications in the inbox.
    An outage (`cluster.transient`: the API server away or answering 429/5xx, a line that is
    not JSON) is reported as one status line and retried with capped backoff; any other
    error ends the watch (`failure`).
    """

    source: Source
    out: Inbox
    stop: threading.Event
    watch_seconds: int
    backoff_max: float
    page_size: int = 500
    # Where the watch resumes: the listing's resourceVersion, then each event's (None: list).
    resource_version: str | None = field(default=None, init=False)
    # Listed from the watch cache (the source's from_cache) until such a listing fails.
    from_cache: bool = field(default=True, init=False)
    # The error that ended the watch when it is not an outage (`transient`): a bug.
    failure: Exception | None = field(default=None, init=False)

    def pages(self) -> Iterator[Notification]:
        """One whole listing as notifications (LIST_START, pages, LIST_END); sets the
        resourceVersion to watch from. Starts over (LIST_RESTART) when a token expires; any
        other error propagates (a listing begun again begins with LIST_START again)."""
        started = False
        while True:
            cached = self.from_cache and self.source.from_cache
            listing = (
                cached_pages(self.source) if cached else list_pages(self.source, self.page_size)
            )
            try:
                for page in prefetched(listing):
                    if not started:  # once the API server answered: a failed call hands nothing
                        yield Notification(self.source.kind, LIST_START)
                        started = True
                    yield Notification(self.source.kind, LIST_PAGE, page.objects)
                    if page.last:
                        self.resource_version = page.resource_version
                break
            except ListingExpiredError as error:
                log.warning("%s; listing again from the start", error)
                yield Notification(self.source.kind, LIST_RESTART)
            except CacheListingError as error:
                log.warning("%s; listing in pages from now on", error)
                self.from_cache = False
                if started:
                    yield Notification(self.source.kind, LIST_RESTART)
        yield Notification(self.source.kind, LIST_END)

    def run(self) -> None:
        """Watch until `stop` is set; an error that is not `transient` ends the watch and is
        kept in `failure` (the bridge raises it: a bug is not retried as an outage)."""
        outage = Outage(f"watch of {self.source.kind}", log)
        try:
            while not self.stop.is_set():
                retry(
                    self._watch_round,
                    what=f"watch of {self.source.kind}",
                    stop=self.stop,
                    transient=transient,
                    cap=self.backoff_max,
                    outage=outage,
                )
        except InterruptedError:
            return
        except Exception as error:
            self.failure = error

    def _watch_round(self) -> None:
        """List if there is no resourceVersion to watch from, then watch until the API server
        ends the watch; a 410 Gone forgets the resourceVersion (the next round relists)."""
        try:
            if self.resource_version is None:  # list everything into the inbox
                for note in self.pages():
                    if not self.out.put(note, self.stop):
                        break
            self._watch_once()
        except Exception as error:
            if not is_gone(error):
                raise
            log.info("%s: resourceVersion too old (410 Gone): relisting", self.source.kind)
            self.resource_version = None

    def _watch_once(self) -> None:
        # The client's own Watch helper cannot report a 410 without deserializing every object
        # into its models; the stream is read here as the API server writes it: JSON lines.
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        response = self.source.call(
            watch=True,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_seconds,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        try:
            raise_for_status(response)
            for line in iter_resp_lines(response):
                if not line:
                    continue
                event = _watch_event(self.source.kind, line)
                obj = event.get("object")
                kind = event.get("type")
                if not isinstance(obj, Mapping):
                    raise WatchGarbageError(f"{self.source.kind}: a watch event without an object")
                if kind == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind in WATCH_ACTIONS:
                    note = Notification(self.source.kind, str(kind), (self.source.keep(obj),))
                    if not self.out.put(note, self.stop):
                        return
                elif kind != "BOOKMARK":
                    raise WatchGarbageError(f"{self.source.kind}: a watch event of type {kind!r}")
                if version:
                    self.resource_version = str(version)
                if self.stop.is_set():
                    return
        finally:
            response.close()
            response.release_conn()


class WatchGarbageError(Exception):
    """The watch stream sent something that is not a watch event (cut mid-line, garbage)."""

    retriable = True  # a connection cut mid-line: the next watch resumes (`transient`)


def _watch_event(kind: Kind, line: str | bytes) -> ApiObject:
    try:
        event = json.loads(line)
    except ValueError as error:
        shown = line[:80] if isinstance(line, str) else line[:80].decode("utf-8", "replace")
        raise WatchGarbageError(f"{kind}: a watch line that is not JSON ({shown!r}...)") from error
    if not isinstance(event, Mapping):
        raise WatchGarbageError(f"{kind}: a watch line that is not a JSON object")
    return event
