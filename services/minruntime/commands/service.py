"""`minruntime migrate | processor | requeue-worker`: the schema and the long-running services.

The services are built by `minruntime.bootstrap` from this invocation's settings; their logs
go to stderr at `--loglevel`.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from minruntime.commands import render
from minruntime.commands.common import current_settings

LogLevel = Annotated[str, typer.Option(help="Log level: debug, info, warning, error.")]

console = render.console()


def migrate_command(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Upgrade the database schema (alembic) to the newest revision, or to REVISION."""
    from minruntime.store.migrate import upgrade

    settings = current_settings()
    upgrade(settings, revision)
    console.print(f"database migrated to {revision} ({settings.database_parts.dbname})")


def processor_command(loglevel: LogLevel = "warning") -> None:
    """Run the stream processors: Kafka topics → PostgreSQL projections, exactly once."""
    from minruntime.bootstrap import run_processor

    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    run_processor(current_settings(), loglevel=loglevel)


def requeue_worker_command(loglevel: LogLevel = "warning") -> None:
    """Run a requeue-worker replica: one replica is active (advisory lock), others stand by."""
    from minruntime.bootstrap import run_requeue_worker

    service_logging(loglevel)
    run_requeue_worker(current_settings())


def service_logging(loglevel: str) -> None:
    """A long-running service's logs: to stderr at `loglevel`, aiokafka's errors only."""
    level = logging.getLevelName(loglevel.upper())
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown log level {loglevel!r}", param_hint="--loglevel")
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
