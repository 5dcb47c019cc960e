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

import functools
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table

from minruntime.audit.service_side import read_podgroups
from minruntime.cluster.diff import Compared, compare_cluster, plan_repair
from minruntime.cluster.drift import Drift, ServicePodGroup, service_podgroup
from minruntime.cluster.drift_metrics import write_textfile
from minruntime.cluster.mirror import Emission
from minruntime.commands.common import current_settings, option
from minruntime.commands.render import counted, wide_console
from minruntime.errors import UserError
from minruntime.produce import send_events
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
    _notes_to_stderr()
    settings = current_settings()
    now = datetime.now(UTC)
    read = functools.partial(_read_service, settings, namespace)
    compared = compare_cluster(settings, namespace, read, with_pods=repair)
    drift = compared.drift
    wide_console().print(render_drift(drift))
    if metrics_file is not None:
        write_metrics(drift, metrics_file, now)
    if repair and drift.differences:
        _repair(settings, compared, namespace, now)
    if drift.differences:
        raise typer.Exit(1)


def _read_service(
    settings: Settings, namespace: str | None, uids: Sequence[str], with_pods: bool
) -> list[ServicePodGroup]:
    return read_podgroups(settings, namespace, uids, with_pods=with_pods, row=service_podgroup)


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


# -- output -----------------------------------------------------------------------------------


def render_drift(drift: Drift) -> RenderableType:
    """One heading line, then one row per differing field of a podgroup."""
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
    try:
        write_textfile(drift, path, now)
    except OSError as error:
        raise UserError(f"cannot write --metrics-file {path}: {error.strerror or error}") from None


# -- repair -----------------------------------------------------------------------------------


def _repair(settings: Settings, compared: Compared, namespace: str | None, now: datetime) -> None:
    """Send what makes the service agree, for the differences a second listing confirms."""
    repair = plan_repair(settings, compared, namespace, now)
    if repair.moved:
        print(
            f"minruntime: note: {repair.moved} difference(s) changed while comparing (in "
            "flight): not repaired; run again",
            file=sys.stderr,
        )
    for note in repair.plan.notes:
        print(f"minruntime: note: not repaired: {note}", file=sys.stderr)
    emissions = repair.plan.emissions
    if not emissions:
        print("nothing to send")
        return
    topic = send_events(settings, [(emission.role, emission.event) for emission in emissions])
    print(f"sent {len(emissions)} event(s) to {topic}:")
    for emission in emissions:
        print(f"  {describe(emission)}")


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
