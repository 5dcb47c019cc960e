"""The `minruntime` command line: names mapped to the commands of `minruntime.commands`.

Errors a user can cause print one line, never a traceback; `main` maps them to an exit code.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Final

import typer

from minruntime.commands.common import database_error, invocation
from minruntime.errors import UserError

app = typer.Typer(
    name="minruntime",
    help="Minimum-runtime protection and transactional requeue for GPU jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
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
# (group, or "" for none; name; module.function of minruntime.commands, or of another package
# by its full name: the dev package's `stack` and `demo`, loaded by name, never imported by the
# service itself), in the order of `minruntime --help`.
_COMMANDS: Final = (
    ("stack", "up", "minruntime_dev.commands.stack.up_command"),
    ("stack", "down", "minruntime_dev.commands.stack.down_command"),
    ("stack", "status", "minruntime_dev.commands.stack.status_command"),
    ("stack", "tool", "minruntime_dev.commands.stack.tool_command"),
    ("", "migrate", "service.migrate_command"),
    ("", "processor", "service.processor_command"),
    ("", "requeue-worker", "service.requeue_worker_command"),
    ("", "produce", "produce.produce_command"),
    ("queues", "apply", "apply.queues_apply_command"),
    ("config", "apply", "apply.config_apply_command"),
    ("", "demo", "minruntime_dev.commands.demo.demo_command"),
    ("kube", "bridge", "kube.bridge_command"),
    ("kube", "evictor", "kube.evictor_command"),
    ("", "replay", "replay.replay_command"),
    ("", "snapshot", "snapshot.snapshot_command"),
    ("", "whatif", "whatif.whatif_command"),
    ("protection", "", "forecast.protection_app"),
    ("", "explain", "explain.explain_command"),
    ("", "audit", "audit.audit_command"),
    ("", "violations", "violations.violations_command"),
    ("", "simulate", "simulate.simulate_command"),
    ("", "doctor", "doctor.doctor_command"),
    ("requeue", "plan", "requeue_plan.plan_command"),
    ("outbox", "", "outbox.outbox_app"),
    ("offsets", "", "offsets.offsets_app"),
    ("kube", "diff", "kube_diff.kube_diff_command"),
    ("checkpoint", "ack", "checkpoint.ack_command"),
    ("stack", "kill-broker", "minruntime_dev.commands.stack.kill_broker_command"),
    ("stack", "start-broker", "minruntime_dev.commands.stack.start_broker_command"),
    ("stack", "failover", "minruntime_dev.commands.stack.failover_command"),
)
_groups = {name: typer.Typer(help=help, no_args_is_help=True) for name, help in _GROUPS.items()}
for group in _groups:
    app.add_typer(_groups[group], name=group)
for group, name, target in _COMMANDS:
    module, attribute = target.rsplit(".", 1)
    qualified = module if "." in module else f"minruntime.commands.{module}"
    command = getattr(importlib.import_module(qualified), attribute)
    if not name:  # a group of its own module (outbox, offsets)
        app.add_typer(command, name=group)
    else:
        (_groups[group] if group else app).command(name)(command)


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
