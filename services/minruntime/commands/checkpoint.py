"""`minruntime checkpoint ack --podgroup NS/NAME [--at RFC3339]`: the checkpoint handshake's
reference client (``cluster.checkpoint_ack``; KUBECONFIG as the other kube commands)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from minruntime.cluster.api import api_client
from minruntime.cluster.checkpoint_ack import acknowledge, checkpoint_time, podgroup_target
from minruntime.commands.common import current_settings

PodGroup = Annotated[
    str,
    typer.Option("--podgroup", help="The PodGroup that saved a checkpoint, NAMESPACE/NAME."),
]
At = Annotated[
    str | None,
    typer.Option("--at", help="When the checkpoint was saved (RFC3339; default: now)."),
]


def ack_command(podgroup: PodGroup, at: At = None) -> None:
    """Write minruntime.kai.scheduler/checkpointed-at on the PodGroup: a checkpoint was saved
    (what a training script's sidecar calls after saving; it answers the evictor's request)."""
    namespace, name = podgroup_target(podgroup)
    moment = checkpoint_time(at, datetime.now(UTC))
    value = acknowledge(api_client(current_settings()), namespace, name, moment)
    print(f"PodGroup {namespace}/{name}: checkpointed-at {value}")
