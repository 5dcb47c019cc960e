"""`minruntime stack`: the local stack's up, down, status and tool, and faults on purpose.

`kill-broker`, `start-broker` and `failover` make one fault at a time, for fault tests and
operators of a stack started with `stack up --brokers 3 --pg-standby` (docs/deployment.md,
"The local stack with three brokers and a standby"): kill one Kafka broker with any signal
and start it again, or fail PostgreSQL over to its standby.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from minruntime.commands.common import current_settings, option
from minruntime.errors import UserError

if TYPE_CHECKING:
    from minruntime_dev.stack import StackStatus

# Progress lines are log lines: never wrapped at a terminal width (a piped `stack up` kept
# its long lines whole only by chance: "CRDs established: ..." with four CRDs was cut in two).
console = Console(highlight=False, soft_wrap=True)


def up_command(
    kube: Annotated[
        bool,
        typer.Option(
            "--kube",
            help="Also etcd + a real kube-apiserver with the CRDs a real KAI needs "
            "(built once with Go; docs/kubernetes.md).",
        ),
    ] = False,
    brokers: Annotated[
        int | None,
        option(
            "--brokers",
            help="1: one broker; 3: a KRaft cluster of three (3 replicas, 2 in sync). "
            "Default: as the stack was last started.",
        ),
    ] = None,
    pg_standby: Annotated[
        bool | None,
        option(
            "--pg-standby/--no-pg-standby",
            help="A synchronous streaming standby of PostgreSQL on the next port. "
            "Default: as the stack was last started.",
        ),
    ] = None,
    kai_crds: Annotated[
        Path | None,
        option(
            "--kai-crds",
            metavar="PATH",
            help="With --kube: apply these CRDs (a YAML file or a directory, e.g. KAI's "
            "deployments/kai-scheduler/crds) in place of the project's of the same name.",
        ),
    ] = None,
    semi_preemptible: Annotated[
        bool,
        typer.Option(
            "--semi-preemptible",
            help="With --kube: the PodGroup CRD also accepts preemptibility semi-preemptible "
            "(KAI's feature branches; KAI main refuses it).",
        ),
    ] = False,
) -> None:
    """Start PostgreSQL and Kafka (idempotent); returns when both really work."""
    from minruntime_dev.stack import stack_up
    from minruntime_dev.stack.crds import CrdChoice

    crds = CrdChoice(kai_crds, semi_preemptible) if kai_crds or semi_preemptible else None
    status = stack_up(
        current_settings(),
        say=console.print,
        kube=kube,
        brokers=brokers,
        pg_standby=pg_standby,
        crds=crds,
    )
    print_connection(status)


def down_command(
    kube: Annotated[
        bool, typer.Option("--kube", help="Stop only the Kubernetes API server and etcd.")
    ] = False,
) -> None:
    """Stop the Kubernetes API server (if running), Kafka and PostgreSQL."""
    from minruntime_dev.stack import kube_down, stack_down

    if kube:
        kube_down(current_settings(), say=console.print)
    else:
        stack_down(current_settings(), say=console.print)


def status_command() -> None:
    """Report each component's health and the connection settings (exit 3 if unhealthy)."""
    from minruntime_dev.stack import stack_status

    status = stack_status(current_settings())
    table = Table("component", "state", "pid", "detail")
    for component in status.components:
        state = (
            "[green]healthy[/]"
            if component.healthy
            else ("[yellow]unhealthy[/]" if component.running else "[red]stopped[/]")
        )
        table.add_row(component.name, state, str(component.pid or "-"), component.detail)
    console.print(table)
    print_connection(status)
    if not status.healthy:
        raise typer.Exit(3)


def tool_command(name: Annotated[str, typer.Argument(help="helm or promtool.")]) -> None:
    """Print the path of a checking tool (helm, promtool), building it once with Go into the
    cache (`~/.cache/minruntime/tools`) when it is missing."""
    from minruntime_dev.stack.gotools import TOOLS, ensure_tool

    tool = TOOLS.get(name)
    if tool is None:
        raise UserError(f"unknown tool {name!r}; one of: {', '.join(sorted(TOOLS))}")
    path = ensure_tool(current_settings(), tool, say=lambda line: print(line, file=sys.stderr))
    print(path)


Broker = Annotated[int, typer.Argument(help="The broker's node id: 1, 2 or 3.", min=1)]


def print_connection(status: StackStatus) -> None:
    """The lines scripts `eval` or grep; no secrets (the URLs name the passfile)."""
    print(f"KAFKA_BOOTSTRAP={status.kafka_bootstrap}")
    print(f"DATABASE_URL={status.database_url}")
    print(f"OWNER_DATABASE_URL={status.owner_database_url}")
    print(f"READER_DATABASE_URL={status.reader_database_url}")
    if status.kubeconfig is not None:
        print(f"KUBECONFIG={status.kubeconfig}")


def parse_signal(name: str) -> signal.Signals:
    """A signal by name, with or without SIG (KILL, sigterm) or by number; one line if not."""
    text = name.strip().upper()
    try:
        return (
            signal.Signals(int(text))
            if text.isdigit()
            else signal.Signals["SIG" + text.removeprefix("SIG")]
        )
    except (KeyError, ValueError):
        raise UserError(f"unknown signal {name!r} (e.g. KILL, TERM, STOP, CONT)") from None


def kill_broker_command(
    node: Broker,
    signal_name: Annotated[
        str,
        typer.Option(
            "--signal",
            "-s",
            help="KILL (the default: a crash), TERM (a clean stop), STOP (a hung broker; "
            "CONT resumes it), or any other signal.",
        ),
    ] = "KILL",
) -> None:
    """Send a signal to one broker of the stack's Kafka cluster (`stack up --brokers 3`)."""
    from minruntime_dev.stack import kafka_cluster

    sig = parse_signal(signal_name)
    pid = kafka_cluster(current_settings()).kill(node, sig)
    gone = " (exited)" if sig in (signal.SIGKILL, signal.SIGTERM) else ""
    print(f"sent {sig.name} to Kafka broker {node}, pid {pid}{gone}")


def start_broker_command(node: Broker) -> None:
    """Start one broker of the stack's Kafka cluster again; returns once the cluster lists it."""
    from minruntime_dev.stack import kafka_cluster

    settings = current_settings()
    cluster = kafka_cluster(settings)
    started = cluster.start_node(node, settings.stack_timeout_seconds)
    state = "started" if started else "already running"
    print(f"Kafka broker {node} {state}; the cluster lists brokers {sorted(cluster.registered())}")


def failover_command() -> None:
    """Fence the PostgreSQL primary and promote its standby (`stack up --pg-standby`); the
    stack's URLs name both servers, so they keep working."""
    from minruntime_dev.stack import stack_failover

    status = stack_failover(current_settings(), say=print)
    print_connection(status)
