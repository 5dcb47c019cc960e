"""`minruntime stack kill-broker | start-broker | failover`: faults on purpose, one at a time.

For fault tests and operators of a stack started with `stack up --brokers 3 --pg-standby`
(docs/deployment.md, "The local stack with three brokers and a standby"): kill one Kafka
broker with any signal and start it again, or fail PostgreSQL over to its standby.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Annotated

import typer

from minruntime.errors import UserError

if TYPE_CHECKING:
    from minruntime.stack import StackStatus

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
    from minruntime.settings import Settings
    from minruntime.stack import kafka_cluster

    sig = parse_signal(signal_name)
    pid = kafka_cluster(Settings()).kill(node, sig)
    gone = " (exited)" if sig in (signal.SIGKILL, signal.SIGTERM) else ""
    print(f"sent {sig.name} to Kafka broker {node}, pid {pid}{gone}")


def start_broker_command(node: Broker) -> None:
    """Start one broker of the stack's Kafka cluster again; returns once the cluster lists it."""
    from minruntime.settings import Settings
    from minruntime.stack import kafka_cluster

    settings = Settings()
    cluster = kafka_cluster(settings)
    started = cluster.start_node(node, settings.stack_timeout_seconds)
    state = "started" if started else "already running"
    print(f"Kafka broker {node} {state}; the cluster lists brokers {sorted(cluster.registered())}")


def failover_command() -> None:
    """Fence the PostgreSQL primary and promote its standby (`stack up --pg-standby`); the
    stack's URLs name both servers, so they keep working."""
    from minruntime.settings import Settings
    from minruntime.stack import stack_failover

    status = stack_failover(Settings(), say=print)
    print_connection(status)
