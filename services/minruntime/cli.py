"""The `minruntime` command line: names mapped to the commands, imported when one runs.

A row of `COMMANDS` names a command by "module:function" and carries the line `--help` lists
for it, so `minruntime --help` and a group's `--help` import no command module (the modules
import what they need at their top). Errors a user can cause print one line, never a
traceback; `main` maps them to an exit code.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any, ClassVar, Final, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup

from minruntime.commands import invocation


class Row(NamedTuple):
    """One command of the command line (or one group that a module defines as a whole)."""

    group: str  # the group it is in; "" for none
    name: str  # its name in the group; "" when the target is a `typer.Typer` group itself
    target: str  # "package.module:attribute", imported when the command runs
    summary: str  # the first paragraph of its help: the line `--help` lists for it


_GROUPS: Final = {
    "stack": "The local Kafka (KRaft) + PostgreSQL stack, for machines without Docker.",
    "queues": "Kubernetes Queue objects (scheduling.run.ai/v2) as queue.upserted events.",
    "config": "KAI's scheduler config (the minruntime plugin's arguments) as config.updated "
    "events.",
    "requeue": "The requeue worker's decisions, without the worker: `requeue plan` is a dry run.",
    "kube": "Kubernetes: the cluster bridge (objects -> events), the evictor, and kube diff "
    "(docs/kubernetes.md).",
    "checkpoint": "The checkpoint handshake's reference client: a workload says it saved a "
    "checkpoint (docs/kubernetes.md).",
}
# In each group, commands are listed in the order of their rows; `minruntime --help` lists the
# commands without a group, then the groups above, then the groups of their own module.
# `tests/unit/test_cli_help.py` checks each summary against the command's own help.
_C: Final = "minruntime.commands"
# The development tooling's commands (`stack`, `demo`): named here, loaded when they run, never
# imported by the service itself (the import-linter contract on minruntime_dev).
_D: Final = "minruntime_dev.commands"
# fmt: off
COMMANDS: Final = (
    Row("stack", "up", f"{_D}.stack:up_command",
        "Start PostgreSQL and Kafka (idempotent); returns when both really work."),
    Row("stack", "down", f"{_D}.stack:down_command",
        "Stop the Kubernetes API server (if running), Kafka and PostgreSQL."),
    Row("stack", "status", f"{_D}.stack:status_command",
        "Report each component's health and the connection settings (exit 3 if unhealthy)."),
    Row("stack", "tool", f"{_D}.stack:tool_command",
        "Print the path of a checking tool (helm, promtool), building it once with Go into the\n"
        "cache (`~/.cache/minruntime/tools`) when it is missing."),
    Row("", "migrate", f"{_C}.service:migrate_command",
        "Upgrade the database schema (alembic) to the newest revision, or to REVISION."),
    Row("", "processor", f"{_C}.service:processor_command",
        "Run the stream processors: Kafka topics → PostgreSQL projections, exactly once."),
    Row("", "requeue-worker", f"{_C}.service:requeue_worker_command",
        "Run a requeue-worker replica: one replica is active (advisory lock), others stand by."),
    Row("", "produce", f"{_C}.produce:produce_command",
        "Validate events against the contract and send them to their topics (all or nothing)."),
    Row("queues", "apply", f"{_C}.apply:queues_apply_command",
        "Send a queue.upserted per Queue object; every object is checked first (all or nothing)."),
    Row("config", "apply", f"{_C}.apply:config_apply_command",
        "Send the minruntime plugin's arguments of a scheduler config as one config.updated."),
    Row("", "demo", f"{_D}.demo:demo_command",
        "The guided run of the README: what the service decides, and why."),
    Row("kube", "bridge", f"{_C}.kube:bridge_command",
        "Watch Queues, PodGroups, Pods, Nodes and the scheduler config; send the events; while\n"
        "active, export the drift between the cluster and the service (as `kube diff`)."),
    Row("kube", "evictor", f"{_C}.kube:evictor_command",
        "Carry out requeue.committed: evict the podgroup's pods, mark its PodGroup."),
    Row("", "replay", f"{_C}.replay:replay_command",
        "Rebuild every projection from the event log into a separate schema; --verify it."),
    Row("", "snapshot", f"{_C}.snapshot:snapshot_command",
        "Snapshot the projections for fast as-of answers when one is due (once, or --every)."),
    Row("", "whatif", f"{_C}.whatif:whatif_command",
        "What a queue or configuration change would do to running podgroups' protection."),
    Row("protection", "", f"{_C}.forecast:protection_app",
        "The protection table: each running podgroup's minimum runtime, window and verdict "
        "(`protection forecast`: whose windows end next)."),
    Row("", "explain", f"{_C}.explain:explain_command",
        "Why a podgroup is or is not protected: the rule, the resolution path, the window."),
    Row("", "audit", f"{_C}.audit:audit_command",
        "The whole story of a podgroup: events, runs, protection windows, nominations, decisions."),
    Row("", "violations", f"{_C}.violations:violations_command",
        "Runs an eviction ended inside their protection window: definite or possible, and why;\n"
        "violated / honoured / unguarded when the scheduler said who evicted."),
    Row("", "simulate", f"{_C}.simulate:simulate_command",
        "Replay a window of the log as recorded and under a change: what it would have cost and\n"
        "saved (violations, requeue decisions, protection time). Writes nothing to the state."),
    Row("", "doctor", f"{_C}.doctor:doctor_command",
        "Check the Kafka topics and the database for settings that can lose acknowledged data."),
    Row("requeue", "plan", f"{_C}.requeue_plan:plan_command",
        "What the requeue worker would nominate, commit or roll back now (or at --at), and why."),
    Row("outbox", "", f"{_C}.outbox:outbox_app",
        "Outbox rows the broker refused for good (set aside by the relay), and retrying them."),
    Row("offsets", "", f"{_C}.offsets:offsets_app",
        "The processor's stored offsets, and re-baselining a topic whose life changed."),
    Row("kube", "diff", f"{_C}.kube_diff:kube_diff_command",
        "Compare the cluster's podgroups with the service's; exit 1 when any differ."),
    Row("checkpoint", "ack", f"{_C}.checkpoint:ack_command",
        "Write minruntime.kai.scheduler/checkpointed-at on the PodGroup: a checkpoint was saved\n"
        "(what a training script's sidecar calls after saving; it answers the evictor's request)."),
    Row("stack", "kill-broker", f"{_D}.stack:kill_broker_command",
        "Send a signal to one broker of the stack's Kafka cluster (`stack up --brokers 3`)."),
    Row("stack", "start-broker", f"{_D}.stack:start_broker_command",
        "Start one broker of the stack's Kafka cluster again; returns once the cluster lists it."),
    Row("stack", "failover", f"{_D}.stack:failover_command",
        "Fence the PostgreSQL primary and promote its standby (`stack up --pg-standby`); the\n"
        "stack's URLs name both servers, so they keep working."),
)
# fmt: on


def load(row: Row) -> Any:
    """The click command (or group) of ``row``: its module imported, built as typer builds it."""
    module, attribute = row.target.split(":")
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command: Any = typer.main.get_group(target)
        command.name = row.group
        return command
    registry = typer.Typer(add_completion=False)
    registry.command(row.name)(target)
    return typer.main.get_command(registry)


class _LazyGroup(TyperGroup):
    """A group whose rows are imported when one is run or parsed; its own help lists their
    summaries, importing nothing."""

    rows: ClassVar[dict[str, Row]] = {}
    # The groups a module defines are listed after the others, as typer lists added groups.
    last: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False
        self._loaded: dict[str, Any] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        first = [name for name in self.rows if name not in self.last]
        return [*first, *super().list_commands(ctx), *self.last]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        row = self.rows.get(cmd_name)
        if row is None:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return TyperCommand(cmd_name, help=row.summary)
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = load(row)
        return self._loaded[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


class _Root(_LazyGroup):
    rows: ClassVar[dict[str, Row]] = {
        row.name or row.group: row for row in COMMANDS if not row.group or not row.name
    }
    last: ClassVar[tuple[str, ...]] = tuple(row.group for row in COMMANDS if not row.name)


def _group(name: str) -> type[_LazyGroup]:
    rows = {row.name: row for row in COMMANDS if row.group == name and row.name}
    return type(f"_{name.title()}Group", (_LazyGroup,), {"rows": rows})


app = typer.Typer(
    name="minruntime",
    help="Minimum-runtime protection and transactional requeue for GPU jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Root,
)
for _name, _help in _GROUPS.items():
    app.add_typer(typer.Typer(help=_help, no_args_is_help=True, cls=_group(_name)), name=_name)


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
        with invocation():
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
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as exc:
        code = _user_error(exc)
        if code is None:
            raise
        return code
    return result if isinstance(result, int) else 0


def _user_error(error: Exception) -> int | None:
    """One line and the exit code for an error a user can act on; None for a bug, which
    shows its traceback."""
    # Imported here, on the error's path: `--help` imports neither the service nor a driver.
    from minruntime.commands.common import database_error
    from minruntime.errors import UserError

    if isinstance(error, UserError):
        # What a user did wrong (the core's errors and rejected events too).
        _error(f"error: {error}")
        return error.exit_code
    # A database that is down or not migrated, in any command: one line, not a traceback.
    message = database_error(error)
    if message is None:
        return None
    _error(f"error: {message}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
