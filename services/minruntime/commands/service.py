"""`minruntime migrate | processor | requeue-worker`: the schema and the long-running services.

The services are built by `minruntime.bootstrap` from this invocation's settings; their logs
go to stderr at `--loglevel`.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from minruntime.bootstrap import migrate, run_processor, run_requeue_worker
from minruntime.commands import render
from minruntime.commands.common import LogLevel, current_settings, service_logging

console = render.console()


def migrate_command(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Upgrade the database schema (alembic) to the newest revision, or to REVISION."""
    settings = current_settings()
    migrate(settings, revision)
    console.print(f"database migrated to {revision} ({settings.database_parts.dbname})")


def processor_command(loglevel: LogLevel = "warning") -> None:
    """Run the stream processors: Kafka topics → PostgreSQL projections, exactly once."""
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    run_processor(current_settings(), loglevel=loglevel)


def requeue_worker_command(loglevel: LogLevel = "warning") -> None:
    """Run a requeue-worker replica: one replica is active (advisory lock), others stand by."""
    service_logging(loglevel)
    run_requeue_worker(current_settings())
