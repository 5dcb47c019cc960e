"""`minruntime checkpoint ack`: the reference client of the checkpoint handshake.

What a training script's sidecar calls after it saved a checkpoint: write
``minruntime.kai.scheduler/checkpointed-at: <RFC3339>`` on its PodGroup (a merge patch of one
annotation; the workload's RBAC needs only ``patch`` on its PodGroup). The evictor, waiting
with a ``checkpoint-requested-at`` on the PodGroup, evicts as soon as it reads a value at or
after its request (docs/kubernetes.md, "The checkpoint handshake"). Writing it after every
save, asked or not, keeps the service's "last checkpoint" of the run current.
"""

from __future__ import annotations

import re
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from minruntime.cluster.api import annotate_podgroup
from minruntime.core import InvalidTimestampError, format_rfc3339, parse_rfc3339
from minruntime.core.checkpoint import CHECKPOINTED_AT_ANNOTATION
from minruntime.errors import UserError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

# Kubernetes names: a namespace is a DNS label (RFC 1123, at most 63), a PodGroup's name a
# DNS subdomain (at most 253).
_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAMESPACE: Final = re.compile(_LABEL)
_NAME: Final = re.compile(rf"{_LABEL}(\.{_LABEL})*")
MAX_NAMESPACE: Final = 63
MAX_NAME: Final = 253


class CheckpointAckError(UserError):
    """The acknowledgement could not be written (one line)."""


def podgroup_target(text: str) -> tuple[str, str]:
    """``NS/NAME`` as (namespace, name); CheckpointAckError when it is not one."""
    namespace, slash, name = text.strip().partition("/")
    if (
        not slash
        or len(namespace) > MAX_NAMESPACE
        or len(name) > MAX_NAME
        or not _NAMESPACE.fullmatch(namespace)
        or not _NAME.fullmatch(name)
    ):
        raise CheckpointAckError(
            f"--podgroup {text[:300]!r}: use NAMESPACE/NAME (lower-case DNS names: a namespace"
            f" of at most {MAX_NAMESPACE}, a name of at most {MAX_NAME} characters)"
        )
    return namespace, name


def checkpoint_time(text: str | None, now: datetime) -> datetime:
    """The ``--at`` instant (``now`` when absent): RFC3339, not in the future of ``now``."""
    if text is None:
        return now
    try:
        moment = parse_rfc3339(text.strip())
    except InvalidTimestampError:
        raise CheckpointAckError(
            f"--at {text[:64]!r}: not an RFC3339 time (2026-11-21T10:00:00Z)"
        ) from None
    if moment > now:
        raise CheckpointAckError(
            f"--at {format_rfc3339(moment)} is in the future (now {format_rfc3339(now)}): a"
            " checkpoint is acknowledged once it is saved"
        )
    return moment


def acknowledge(client: ApiClient, namespace: str, name: str, at: datetime) -> str:
    """Write ``checkpointed-at: at`` on the PodGroup; the value written. One-line errors."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    value = format_rfc3339(at)
    try:
        annotations = {CHECKPOINTED_AT_ANNOTATION: value}
        annotate_podgroup(k8s.CustomObjectsApi(client), namespace, name, annotations)
    except ApiException as error:
        if error.status == HTTPStatus.NOT_FOUND:
            raise CheckpointAckError(f"PodGroup {namespace}/{name} not found") from None
        if error.status == HTTPStatus.FORBIDDEN:
            raise CheckpointAckError(
                f"forbidden to patch PodGroup {namespace}/{name}: the workload's role needs"
                " `patch` on podgroups.scheduling.run.ai (docs/kubernetes.md)"
            ) from None
        raise CheckpointAckError(
            f"PodGroup {namespace}/{name}: the API server answered {error.status}"
            f" {' '.join(str(error.reason).split())}"
        ) from None
    except (HTTPError, OSError) as error:
        raise CheckpointAckError(
            f"cannot reach the Kubernetes API server: {' '.join(str(error).split())[:300]}"
        ) from None
    return value
