"""One listing of the cluster with the bridge's own calls, for a comparison with the service.

Used by `minruntime kube diff` and by the bridge's periodic drift check
(``cluster.drift_watch``): every kept object of each kind, paged as the bridge lists, with a
timeout per call; a failure is one line (a ``UserError``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from minruntime.cluster.api import list_all, sources
from minruntime.cluster.objects import ApiObject
from minruntime.errors import UserError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from minruntime.cluster.mirror import Kind
    from minruntime.settings import Settings

# One API call may take this long (connect, read) before the listing gives up with one line.
REQUEST_TIMEOUT: Final = (10, 120)
# What is kept of an object of another namespace: nothing (no uid, so never compared).
_ELSEWHERE: Final[ApiObject] = {}


def list_cluster(
    client: ApiClient, settings: Settings, kinds: Sequence[Kind], namespace: str | None = None
) -> dict[Kind, list[ApiObject]]:
    """Every (kept) object of each kind, paged as the bridge lists; one line when it fails.

    With ``namespace``, namespaced objects of other namespaces are listed but not kept.
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    by_kind = {source.kind: source for source in sources(client, settings)}
    listing: dict[Kind, list[ApiObject]] = {}
    for kind in kinds:
        source = by_kind[kind]
        timed = dataclasses.replace(
            source,
            call=functools.partial(source.call, _request_timeout=REQUEST_TIMEOUT),
            keep=_kept_in(namespace, source.keep),
        )
        try:
            listing[kind], _ = list_all(timed, settings.kube_list_page_size)
        except (ApiException, HTTPError, OSError, ValueError) as error:
            raise UserError(
                f"cannot list {kind} objects from the Kubernetes API server: {api_error(error)}"
            ) from error
    return listing


def _kept_in(
    namespace: str | None, keep: Callable[[ApiObject], ApiObject]
) -> Callable[[ApiObject], ApiObject]:
    if namespace is None:
        return keep

    def kept(obj: ApiObject) -> ApiObject:
        metadata = obj.get("metadata") or {}
        elsewhere = metadata.get("namespace") not in (None, namespace)
        return _ELSEWHERE if elsewhere else keep(obj)

    return kept


def api_error(error: BaseException) -> str:
    """What the API server (or the connection to it) said, on one line."""
    status = getattr(error, "status", None)
    if isinstance(status, int):
        return f"the API server answered {status} {getattr(error, 'reason', '') or ''}".strip()
    reason = getattr(error, "reason", None)  # urllib3's MaxRetryError: the last failure
    return " ".join(str(reason or error).split())
