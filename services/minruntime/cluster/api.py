"""The Kubernetes API, as the bridge and the evictor use it: connect, list, watch, as plain dicts.

Objects stay the API server's JSON (dicts), never the client's models: the mapping reads the
same fields whatever the client version, and custom resources need no generated classes.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from minruntime.cluster.mirror import Kind
from minruntime.errors import UserError
from minruntime.settings import Settings

log = logging.getLogger(__name__)

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


def is_gone(error: BaseException) -> bool:
    """A 410 Gone: the resourceVersion is too old to watch from; relist."""
    return getattr(error, "status", None) == HTTP_GONE


def read_json(response: Any) -> Any:
    """The JSON body of a call made with _preload_content=False (an error status raises)."""
    raise_for_status(response)
    return json.loads(response.data)


def raise_for_status(response: Any) -> None:
    """With _preload_content=False the client does not raise for an error status: do it."""
    from kubernetes.client.exceptions import ApiException

    status = getattr(response, "status", 200)
    if isinstance(status, int) and not 200 <= status <= 299:
        raise ApiException(status=status, reason=getattr(response, "reason", None))


@dataclass(frozen=True)
class Source:
    """One watched kind and the list call that lists and watches it."""

    kind: Kind
    call: Callable[..., Any]


def sources(client: Any, settings: Settings) -> list[Source]:
    """What the bridge watches, in the order of the first listing (classes before podgroups)."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(client)
    custom = k8s.CustomObjectsApi(client)
    scheduling = k8s.SchedulingV1Api(client)
    namespace, _, name = settings.kube_scheduler_config.partition("/")
    return [
        Source(Kind.PRIORITY_CLASS, scheduling.list_priority_class),
        Source(
            Kind.CONFIG_MAP,
            functools.partial(
                core.list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}"
            ),
        ),
        Source(
            Kind.QUEUE,
            functools.partial(
                custom.list_cluster_custom_object, KAI_GROUP, QUEUE_VERSION, "queues"
            ),
        ),
        Source(Kind.NODE, core.list_node),
        Source(
            Kind.POD_GROUP,
            functools.partial(
                custom.list_cluster_custom_object, KAI_GROUP, PODGROUP_VERSION, "podgroups"
            ),
        ),
        Source(Kind.POD, core.list_pod_for_all_namespaces),
    ]


@dataclass(frozen=True)
class Notification:
    """What a watcher hands the bridge: a relist (objects = every item) or one watch event."""

    kind: Kind
    action: str  # ADDED | MODIFIED | DELETED | RELIST
    objects: tuple[Mapping[str, Any], ...]


RELIST: Final = "RELIST"


def list_all(source: Source) -> tuple[list[Mapping[str, Any]], str]:
    """Every object of the kind and the list's resourceVersion (to watch from)."""
    body = read_json(source.call(_preload_content=False))
    return list(body.get("items") or []), str(body["metadata"]["resourceVersion"])


class Watcher:
    """Lists once, then watches from the last resourceVersion; relists on 410 Gone.

    Runs in its own thread (the client is blocking) and puts Notifications on `out`. Errors
    (API server away, a refused call) back off exponentially up to `backoff_max` seconds.
    """

    def __init__(
        self,
        source: Source,
        out: queue.Queue[Notification],
        stop: threading.Event,
        watch_seconds: int,
        backoff_max: float,
    ) -> None:
        self.source = source
        self.out = out
        self.stop = stop
        self.watch_seconds = watch_seconds
        self.backoff_max = backoff_max
        self.resource_version: str | None = None

    def relist(self) -> None:
        """List everything and hand it over as one RELIST notification."""
        items, self.resource_version = list_all(self.source)
        self.out.put(Notification(self.source.kind, RELIST, tuple(items)))

    def run(self) -> None:
        """Watch until `stop` is set."""
        backoff = 0.5
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self._watch_once()
                backoff = 0.5
            except Exception as error:
                if is_gone(error):
                    log.info("%s: resourceVersion too old (410 Gone): relisting", self.source.kind)
                    self.resource_version = None
                    continue
                log.warning(
                    "%s: watch failed (%s); retrying in %.1fs", self.source.kind, error, backoff
                )
                self.stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)

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
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if event.get("type") != "BOOKMARK":
                    self.out.put(Notification(self.source.kind, event["type"], (obj,)))
                if version:
                    self.resource_version = str(version)
                if self.stop.is_set():
                    return
        finally:
            response.close()
            response.release_conn()
