"""`minruntime kube diff [--repair]`: what the cluster shows against what the service holds.

Lists the cluster with the bridge's own calls (``cluster.api.sources``, paged), then reads the
service's read surface (``minruntime.podgroups``, as ``MINRUNTIME_DATABASE_URL``'s role; the
reader role works too), compares (``cluster.drift``), prints one table and exits 1 when
anything differs. ``--repair`` sends the events that make the two agree
(``cluster.repair``) to the input topics, as the bridge encodes them. ``--metrics-file``
writes the counts for node_exporter's textfile collector. docs/kubernetes.md,
"Reconciliation".
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from minruntime.commands.common import current_settings, disposed, option
from minruntime.commands.render import counted, wide_console
from minruntime.errors import UserError

if TYPE_CHECKING:
    from rich.console import RenderableType

    from minruntime.cluster.drift import Drift, ServicePodGroup
    from minruntime.cluster.mirror import Emission
    from minruntime.settings import Settings

Repair = Annotated[
    bool,
    typer.Option("--repair", help="Send the events that make the service agree with the cluster."),
]
Namespace = Annotated[
    str | None,
    option(
        "--namespace",
        "-n",
        metavar="NAMESPACE",
        help="Only the podgroups of this namespace (default: every namespace).",
    ),
]
MetricsFile = Annotated[
    Path | None,
    option(
        "--metrics-file",
        metavar="PATH",
        help="Also write the counts as Prometheus text (node_exporter's textfile collector).",
    ),
]


_ABSENT: Final = "-"


def kube_diff_command(
    repair: Repair = False, namespace: Namespace = None, metrics_file: MetricsFile = None
) -> None:
    """Compare the cluster's podgroups with the service's; exit 1 when any differ."""
    from minruntime.cluster.api import api_client
    from minruntime.cluster.drift import cluster_podgroups, compare
    from minruntime.cluster.listing import list_cluster
    from minruntime.cluster.mirror import Kind

    _notes_to_stderr()
    settings = current_settings()
    now = datetime.now(UTC)
    kinds = [Kind.POD_GROUP, Kind.POD]
    client = api_client(settings)
    listing = list_cluster(client, settings, kinds, namespace)
    cluster = cluster_podgroups(listing[Kind.POD_GROUP], listing[Kind.POD], namespace)
    rows = read_service(settings, namespace, list(cluster), with_pods=repair)
    drift = compare(cluster, rows, namespace)
    console = wide_console()
    console.print(render_drift(drift))
    if metrics_file is not None:
        write_metrics(drift, metrics_file, now)
    if repair and drift.differences:
        _repair(settings, client, drift, rows, namespace, now)
    if drift.differences:
        raise typer.Exit(1)


def _notes_to_stderr() -> None:
    """The mapping's warnings (an annotation over the bounds, a PodGroup it cannot map) as
    one line each on stderr; the client's retries are its own business: the command says
    what failed, once."""
    logging.getLogger("urllib3").setLevel(logging.CRITICAL)
    cluster_log = logging.getLogger("minruntime.cluster")
    if not cluster_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("minruntime: note: %(message)s"))
        cluster_log.addHandler(handler)


# -- the two sides ----------------------------------------------------------------------------


def read_service(
    settings: Settings, namespace: str | None, uids: Sequence[str], *, with_pods: bool
) -> list[ServicePodGroup]:
    """The rows of ``minruntime.podgroups`` (of ``namespace`` and ``uids``, or all); with
    ``with_pods``, the names of the pods each holds, when the role may read them."""
    from minruntime.cluster.drift import ServicePodGroup
    from minruntime.store import engine_from
    from minruntime.store.read_surface import held_pods, service_podgroups
    from minruntime.store.read_transactions import repeatable_read

    engine = engine_from(settings, pool_pre_ping=False, connect_args={"connect_timeout": 10})
    with disposed(engine), repeatable_read(engine) as conn:
        rows = service_podgroups(conn, namespace, uids)
        only = [row["uid"] for row in rows] if namespace is not None else None
        held = held_pods(conn, only) if with_pods else None
    return [
        ServicePodGroup(
            uid=row["uid"],
            status=row["status"],
            name=row["name"],
            namespace=row["namespace"],
            queue=row["queue"],
            start_time=row["start_time"],
            running_pods=row["running_pods"] or 0,
            annotations={str(k): str(v) for k, v in (row["annotations"] or {}).items()},
            running=None if held is None else tuple(sorted(held.get(row["uid"], ()))),
            updated_at=row["updated_at"],
        )
        for row in rows
    ]


# -- output -----------------------------------------------------------------------------------


def render_drift(drift: Drift) -> RenderableType:
    """One heading line, then one row per differing field of a podgroup."""
    from rich import box
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    count = len(drift.uids)
    compared = f"{counted(drift.checked, 'podgroup')} compared"
    if not count:
        return Group(f"[bold]no differences[/]: {compared}")
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for header in ("podgroup", "uid", "field", "cluster", "service"):
        grid.add_column(header, overflow="fold")
    for difference in drift.differences:
        grid.add_row(
            escape(f"{difference.namespace}/{difference.name}"),
            escape(difference.uid),
            escape(difference.field),
            escape(difference.cluster or _ABSENT),
            escape(difference.service or _ABSENT),
        )
    heading = f"[bold]{counted(count, 'podgroup')} differ[/] ({compared})"
    return Group(heading, grid)


def write_metrics(drift: Drift, path: Path, now: datetime) -> None:
    """The counts in Prometheus' text format, replaced atomically (a textfile collector)."""
    from minruntime.cluster.drift_metrics import write_textfile

    try:
        write_textfile(drift, path, now)
    except OSError as error:
        raise UserError(f"cannot write --metrics-file {path}: {error.strerror or error}") from None


# -- repair -----------------------------------------------------------------------------------


def _repair(
    settings: Settings,
    client: Any,
    drift: Drift,
    rows: Sequence[ServicePodGroup],
    namespace: str | None,
    now: datetime,
) -> None:
    """Send what makes the service agree, for the differences a second listing confirms."""
    from minruntime.cluster.api import mirror_options
    from minruntime.cluster.drift import cluster_podgroups, compare, confirmed
    from minruntime.cluster.listing import list_cluster
    from minruntime.cluster.mirror import Kind
    from minruntime.cluster.repair import mirrored, repair

    kinds = [Kind.PRIORITY_CLASS, Kind.POD_GROUP, Kind.POD]
    listing = list_cluster(client, settings, kinds, namespace)
    cluster = cluster_podgroups(listing[Kind.POD_GROUP], listing[Kind.POD], namespace)
    sure = confirmed(drift, compare(cluster, rows, namespace))
    moved = len(drift.differences) - len(sure.differences)
    if moved:
        print(
            f"minruntime: note: {moved} difference(s) changed while comparing (in flight): "
            "not repaired; run again",
            file=sys.stderr,
        )
    differing = [cluster[uid] for uid in sure.uids if uid in cluster]
    fed = {
        Kind.PRIORITY_CLASS: listing[Kind.PRIORITY_CLASS],
        Kind.POD_GROUP: [side.podgroup for side in differing],
        Kind.POD: [pod for side in differing for pod in side.pods],
    }
    plan = repair(sure, cluster, rows, mirrored(fed, mirror_options(settings), lambda: now), now)
    for note in plan.notes:
        print(f"minruntime: note: not repaired: {note}", file=sys.stderr)
    if not plan.emissions:
        print("nothing to send")
        return
    topic = send_emissions(settings, plan.emissions)
    print(f"sent {len(plan.emissions)} event(s) to {topic}:")
    for emission in plan.emissions:
        print(f"  {describe(emission)}")


def send_emissions(settings: Settings, emissions: Sequence[Emission]) -> str:
    """Send with an idempotent producer, as the bridge encodes (key: subject, header: id)."""
    import asyncio

    from minruntime.events import encode_event
    from minruntime.produce import Outgoing, send
    from minruntime.stream.topics import TopicRole, topic_names

    names = topic_names(settings)
    outgoing = [
        Outgoing(
            names[TopicRole(emission.role)],
            emission.event.subject.encode(),
            encode_event(emission.event),
            (("id", emission.event.id.encode()),),
        )
        for emission in emissions
    ]
    asyncio.run(send(settings, outgoing))
    return ", ".join(sorted({record.topic for record in outgoing}))


def describe(emission: Emission) -> str:
    """One line: the type, the podgroup and what the data says beside its uid."""
    data = emission.event.data.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("uid", None)
    detail = ", ".join(f"{key} {_short(value)}" for key, value in data.items())
    return f"{emission.event.type} {emission.event.subject}" + (f": {detail}" if detail else "")


def _short(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return "[" + ", ".join(str(item.get("name")) for item in value) + "]"
    if isinstance(value, list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {item}" for key, item in value.items()) + "}"
    return str(value)
