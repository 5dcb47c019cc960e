"""The `minruntime` command line: names mapped to the commands of `minruntime.commands`.

Errors a user can cause print one line, never a traceback; `main` maps them to an exit code.
"""

from __future__ import annotations

import logging
import sys

import typer

from minruntime.commands import (
    apply,
    audit,
    demo,
    doctor,
    explain,
    kube,
    kube_diff,
    offsets,
    outbox,
    produce,
    replay,
    requeue_plan,
    service,
    snapshot,
    stack,
    violations,
    whatif,
)
from minruntime.commands.common import database_error, invocation
from minruntime.errors import UserError

app = typer.Typer(
    name="minruntime",
    help="Minimum-runtime protection and transactional requeue for GPU jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _group(name: str, help: str) -> typer.Typer:
    group = typer.Typer(help=help, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


stack_app = _group(
    "stack", "The local Kafka (KRaft) + PostgreSQL stack, for machines without Docker."
)
queues_app = _group(
    "queues", "Kubernetes Queue objects (scheduling.run.ai/v2) as queue.upserted events."
)
config_app = _group(
    "config",
    "KAI's scheduler config (the minruntime plugin's arguments) as config.updated events.",
)
requeue_app = _group(
    "requeue",
    "The requeue worker's decisions, without the worker: `requeue plan` is a dry run.",
)
kube_app = _group(
    "kube",
    "Kubernetes: the cluster bridge (objects -> events), the evictor, and kube diff "
    "(docs/kubernetes.md).",
)

# The order here is the order of `minruntime --help`.
stack_app.command("up")(stack.up_command)
stack_app.command("down")(stack.down_command)
stack_app.command("status")(stack.status_command)
stack_app.command("tool")(stack.tool_command)
app.command("migrate")(service.migrate_command)
app.command("processor")(service.processor_command)
app.command("requeue-worker")(service.requeue_worker_command)
app.command("produce")(produce.produce_command)
queues_app.command("apply")(apply.queues_apply_command)
config_app.command("apply")(apply.config_apply_command)
app.command("demo")(demo.demo_command)
kube_app.command("bridge")(kube.bridge_command)
kube_app.command("evictor")(kube.evictor_command)
app.command("replay")(replay.replay_command)
app.command("snapshot")(snapshot.snapshot_command)
app.command("whatif")(whatif.whatif_command)
app.command("protection")(explain.protection_command)
app.command("explain")(explain.explain_command)
app.command("audit")(audit.audit_command)
app.command("violations")(violations.violations_command)
app.command("doctor")(doctor.doctor_command)
requeue_app.command("plan")(requeue_plan.plan_command)
app.add_typer(outbox.outbox_app, name="outbox")
app.add_typer(offsets.offsets_app, name="offsets")
kube_app.command("diff")(kube_diff.kube_diff_command)
stack_app.command("kill-broker")(stack.kill_broker_command)
stack_app.command("start-broker")(stack.start_broker_command)
stack_app.command("failover")(stack.failover_command)


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
    except UserError as exc:
        # What a user did wrong (the core's errors and rejected events too): one line. Any
        # other error is a bug and shows its traceback.
        _error(f"error: {exc}")
        return exc.exit_code
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
