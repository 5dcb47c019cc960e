"""The `minruntime` command line. Errors a user can cause print one line, never a traceback."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from minruntime.commands import audit as audit_commands
from minruntime.commands import doctor as doctor_commands
from minruntime.commands import explain as explain_commands
from minruntime.commands import kube_diff as kube_diff_commands
from minruntime.commands import offsets as offsets_commands
from minruntime.commands import outbox as outbox_commands
from minruntime.commands import replay as replay_commands
from minruntime.commands import requeue_plan as requeue_plan_commands
from minruntime.commands import snapshot as snapshot_commands
from minruntime.commands import stack as stack_commands
from minruntime.commands import violations as violations_commands
from minruntime.commands import whatif as whatif_commands
from minruntime.commands.common import database_error
from minruntime.commands.stack import print_connection as _print_connection
from minruntime.errors import UserError
from minruntime.settings import Settings

if TYPE_CHECKING:
    from pydantic import BaseModel


app = typer.Typer(
    name="minruntime",
    help="Minimum-runtime protection and transactional requeue for GPU jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
stack_app = typer.Typer(
    help="The local Kafka (KRaft) + PostgreSQL stack, for machines without Docker.",
    no_args_is_help=True,
)
app.add_typer(stack_app, name="stack")
queues_app = typer.Typer(
    help="Kubernetes Queue objects (scheduling.run.ai/v2) as queue.upserted events.",
    no_args_is_help=True,
)
app.add_typer(queues_app, name="queues")
config_app = typer.Typer(
    help="KAI's scheduler config (the minruntime plugin's arguments) as config.updated events.",
    no_args_is_help=True,
)
app.add_typer(config_app, name="config")

requeue_app = typer.Typer(
    help="The requeue worker's decisions, without the worker: `requeue plan` is a dry run.",
    no_args_is_help=True,
)
app.add_typer(requeue_app, name="requeue")

kube_app = typer.Typer(
    help="Kubernetes: the cluster bridge (objects -> events), the evictor, and kube diff "
    "(docs/kubernetes.md).",
    no_args_is_help=True,
)
app.add_typer(kube_app, name="kube")

console = Console(highlight=False)


def _say(message: str) -> None:
    console.print(message)


@stack_app.command("up")
def stack_up_command(
    kube: Annotated[
        bool,
        typer.Option(
            "--kube",
            help="Also etcd + a real kube-apiserver with the Queue/PodGroup CRDs "
            "(built once with Go; docs/kubernetes.md).",
        ),
    ] = False,
    brokers: Annotated[
        int | None,
        typer.Option(
            "--brokers",
            help="1: one broker; 3: a KRaft cluster of three (3 replicas, 2 in sync). "
            "Default: as the stack was last started.",
            show_default=False,
        ),
    ] = None,
    pg_standby: Annotated[
        bool | None,
        typer.Option(
            "--pg-standby/--no-pg-standby",
            help="A synchronous streaming standby of PostgreSQL on the next port. "
            "Default: as the stack was last started.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start PostgreSQL and Kafka (idempotent); returns when both really work."""
    from minruntime.stack import stack_up

    status = stack_up(Settings(), say=_say, kube=kube, brokers=brokers, pg_standby=pg_standby)
    _print_connection(status)


@stack_app.command("down")
def stack_down_command(
    kube: Annotated[
        bool,
        typer.Option("--kube", help="Stop only the Kubernetes API server and etcd."),
    ] = False,
) -> None:
    """Stop the Kubernetes API server (if running), Kafka and PostgreSQL."""
    from minruntime.stack import kube_down, stack_down

    if kube:
        kube_down(Settings(), say=_say)
    else:
        stack_down(Settings(), say=_say)


@stack_app.command("status")
def stack_status_command() -> None:
    """Report each component's health and the connection settings (exit 3 if unhealthy)."""
    from minruntime.stack import stack_status

    status = stack_status(Settings())
    table = Table("component", "state", "pid", "detail")
    for component in status.components:
        state = (
            "[green]healthy[/]"
            if component.healthy
            else ("[yellow]unhealthy[/]" if component.running else "[red]stopped[/]")
        )
        table.add_row(component.name, state, str(component.pid or "-"), component.detail)
    console.print(table)
    _print_connection(status)
    if not status.healthy:
        raise typer.Exit(3)


@stack_app.command("tool")
def stack_tool_command(
    name: Annotated[str, typer.Argument(help="helm or promtool.")],
) -> None:
    """Print the path of a checking tool (helm, promtool), building it once with Go into the
    cache (`~/.cache/minruntime/tools`) when it is missing."""
    from minruntime.stack.gotools import TOOLS, ensure_tool

    tool = TOOLS.get(name)
    if tool is None:
        raise UserError(f"unknown tool {name!r}; one of: {', '.join(sorted(TOOLS))}")
    path = ensure_tool(Settings(), tool, say=lambda line: print(line, file=sys.stderr))
    print(path)


@app.command("migrate")
def migrate_command(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Upgrade the database schema (alembic) to the newest revision, or to REVISION."""
    from minruntime.store.migrate import upgrade

    settings = Settings()
    upgrade(settings, revision)
    console.print(f"database migrated to {revision} ({settings.database_parts.dbname})")


@app.command("processor")
def processor_command(
    loglevel: Annotated[
        str, typer.Option(help="Log level: debug, info, warning, error.")
    ] = "warning",
) -> None:
    """Run the stream processors: Kafka topics → PostgreSQL projections, exactly once."""
    from minruntime.bootstrap import run_processor

    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    run_processor(Settings(), loglevel=loglevel)


@app.command("requeue-worker")
def requeue_worker_command(
    loglevel: Annotated[
        str, typer.Option(help="Log level: debug, info, warning, error.")
    ] = "warning",
) -> None:
    """Run a requeue-worker replica: one replica is active (advisory lock), others stand by."""
    from minruntime.bootstrap import run_requeue_worker

    _log_to_stderr(loglevel)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    run_requeue_worker(Settings())


LogLevel = Annotated[str, typer.Option(help="Log level: debug, info, warning, error.")]


def _service_logging(loglevel: str) -> None:
    """A long-running service's logs: to stderr at `loglevel`, aiokafka's errors only."""
    _log_to_stderr(loglevel)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)


def _log_to_stderr(loglevel: str) -> None:
    level = logging.getLevelName(loglevel.upper())
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown log level {loglevel!r}", param_hint="--loglevel")
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )


class ContentMode(StrEnum):
    """The content modes of the CloudEvents Kafka binding (docs/events.md, "Content modes")."""

    STRUCTURED = "structured"
    BINARY = "binary"


@app.command("produce")
def produce_command(
    files: Annotated[list[str], typer.Argument(help="JSON, JSONL or YAML files; - for stdin.")],
    mode: Annotated[
        ContentMode,
        typer.Option(
            "--mode",
            help="CloudEvents Kafka content mode: structured (the event is the value) or "
            "binary (attributes in ce_ headers, the data is the value).",
        ),
    ] = ContentMode.STRUCTURED,
) -> None:
    """Validate events against the contract and send them to their topics (all or nothing)."""
    from minruntime.produce import produce

    counts = produce(files, Settings(), mode.value)
    summary = ", ".join(f"{topic}: {count}" for topic, count in sorted(counts.items()))
    console.print(f"sent {sum(counts.values())} events ({summary})")


ManifestFiles = Annotated[
    list[str],
    typer.Option(
        "--filename",
        "-f",
        help="A YAML file (several documents allowed), a directory of .yaml/.yml/.json files, "
        "or - for stdin. Repeatable.",
    ),
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the events as JSON lines; send nothing.")
]
# A summary names at most this many queues, so it stays one line.
_NAMES_IN_SUMMARY = 8


@queues_app.command("apply")
def queues_apply_command(files: ManifestFiles, dry_run: DryRun = False) -> None:
    """Send a queue.upserted per Queue object; every object is checked first (all or nothing)."""
    from minruntime.events import EventType
    from minruntime.kube import queue_upserts, read_manifests

    manifests = read_manifests(files)
    upserts = queue_upserts(manifests)
    topic = _send_events(
        EventType.QUEUE_UPSERTED,
        [(m.where, u) for m, u in zip(manifests, upserts, strict=True)],
        dry_run=dry_run,
    )
    if topic is not None:
        names = [upsert.name for upsert in upserts]
        shown = ", ".join(names[:_NAMES_IN_SUMMARY])
        if len(names) > _NAMES_IN_SUMMARY:
            shown += f", and {len(names) - _NAMES_IN_SUMMARY} more"
        print(f"sent {len(names)} queue.upserted event(s) to {topic}: {shown}")


@config_app.command("apply")
def config_apply_command(
    files: ManifestFiles,
    node_pool: Annotated[
        str, typer.Option("--node-pool", help="The node pool (scheduler shard) it configures.")
    ] = "default",
    dry_run: DryRun = False,
) -> None:
    """Send the minruntime plugin's arguments of a scheduler config as one config.updated."""
    from minruntime.events import EventType
    from minruntime.kube import config_update, read_manifests

    manifests = read_manifests(files)
    update = config_update(manifests, node_pool)
    topic = _send_events(EventType.CONFIG_UPDATED, [(manifests[0].where, update)], dry_run=dry_run)
    if topic is not None:
        arguments = update.model_dump(mode="json", by_alias=True, exclude={"node_pool"})
        shown = ", ".join(f"{name}={value}" for name, value in arguments.items())
        print(f"sent config.updated for node pool {update.node_pool} to {topic}: {shown}")


def _send_events(
    event_type: str, items: Sequence[tuple[str, BaseModel]], *, dry_run: bool
) -> str | None:
    """Send through `minruntime produce`'s path, or print JSON lines; the topic if sent."""
    import asyncio
    from datetime import UTC, datetime

    from minruntime.produce import prepare, send

    settings = Settings()
    now = datetime.now(UTC)
    outgoing = [
        prepare(
            where,
            {"type": event_type, "data": data.model_dump(mode="json", exclude_none=True)},
            settings,
            now,
        )
        for where, data in items
    ]
    if dry_run:
        for record in outgoing:
            print(record.value.decode())
        return None
    asyncio.run(send(settings, outgoing))
    return outgoing[0].topic


@app.command("demo")
def demo_command(
    width: Annotated[int, typer.Option(help="Terminal width for the tables.")] = 120,
    rules_only: Annotated[
        bool, typer.Option("--rules-only", help="Only the rule engine (no Kafka/PostgreSQL).")
    ] = False,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", help="Where the audit timeline picture is written.")
    ] = Path("demo-output"),
    kube: Annotated[
        bool,
        typer.Option(
            "--kube",
            help="Only the Kubernetes loop (bridge, worker, evictor) on the API server of "
            "`stack up --kube`; about a minute.",
        ),
    ] = False,
) -> None:
    """The guided run of the README: what the service decides, and why."""
    from minruntime.demo import run_demo

    demo_console = Console(width=width, highlight=False)
    if kube:
        from minruntime.demo_kube import run_kube_demo

        run_kube_demo(demo_console, Settings())
        return
    run_demo(demo_console)
    if not rules_only:
        from minruntime.demo_layers import run_layers_demo
        from minruntime.demo_pipeline import run_pipeline_demo

        run_pipeline_demo(demo_console, Settings(), output_dir=output_dir)
        run_layers_demo(demo_console, Settings())


@kube_app.command("bridge")
def kube_bridge_command(loglevel: LogLevel = "warning") -> None:
    """Watch Queues, PodGroups, Pods, Nodes and the scheduler config; send the events."""
    from minruntime.cluster.bridge import run_bridge

    _service_logging(loglevel)
    run_bridge(Settings())


@kube_app.command("evictor")
def kube_evictor_command(loglevel: LogLevel = "warning") -> None:
    """Carry out requeue.committed: evict the podgroup's pods, mark its PodGroup."""
    from minruntime.cluster.evictor import run_evictor

    _service_logging(loglevel)
    run_evictor(Settings())


# Operator commands (minruntime.commands.*): one registration line each.
app.command("replay")(replay_commands.replay_command)
app.command("snapshot")(snapshot_commands.snapshot_command)
app.command("whatif")(whatif_commands.whatif_command)
app.command("protection")(explain_commands.protection_command)
app.command("explain")(explain_commands.explain_command)
app.command("audit")(audit_commands.audit_command)
app.command("violations")(violations_commands.violations_command)
app.command("doctor")(doctor_commands.doctor_command)
requeue_app.command("plan")(requeue_plan_commands.plan_command)
app.add_typer(outbox_commands.outbox_app, name="outbox")
app.add_typer(offsets_commands.offsets_app, name="offsets")
kube_app.command("diff")(kube_diff_commands.kube_diff_command)
stack_app.command("kill-broker")(stack_commands.kill_broker_command)
stack_app.command("start-broker")(stack_commands.start_broker_command)
stack_app.command("failover")(stack_commands.failover_command)
# -- end of operator commands --


def _error(message: str) -> None:
    # One plain line on stderr: no wrapping, no markup, no traceback.
    print(f"minruntime: {' '.join(message.split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the command, turning every user error into one line and an exit code."""
    # Client libraries log retried, transient conditions (a new topic's leader election) as
    # warnings, and a refused connection as an error; a one-shot command reports what failed,
    # once, itself. The long-running services turn the client's errors back on.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="minruntime", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:
        # Usage errors (unknown command or option, bad value): one line and a pointer.
        format_message = getattr(exc, "format_message", None)
        message = format_message() if callable(format_message) else str(exc)
        _error(f"{message} (see `minruntime --help`)")
        return int(getattr(exc, "exit_code", 2))
    except typer.Abort:
        _error("aborted")
        return 130
    except UserError as exc:
        _error(f"error: {exc}")
        return exc.exit_code
    except ValueError as exc:
        # The rule engine's errors are ValueErrors with a message a user can act on.
        _error(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as exc:
        # A database that is down or not migrated, in any command: one line, not a traceback.
        message = database_error(exc)
        if message is None:
            raise
        _error(f"error: {message}")
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
