"""The work an eviction really lost: since the run's last checkpoint (issue 28).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29

``run_log`` gains ``last_checkpoint`` (the run's last ``minruntime.kai.scheduler/checkpointed-at``
when it ended, not before its start nor after its end; NULL: none known) and
``gpu_seconds_since_checkpoint`` (for a run an eviction ended with a checkpoint known: GPUs x
(run_end - max(run_start, last_checkpoint)); NULL otherwise), shown at the end of
``minruntime.runs`` beside ``gpu_seconds`` (core.runs, docs/storage.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "minruntime_state"
_COLUMNS = (("last_checkpoint", "timestamptz"), ("gpu_seconds_since_checkpoint", "numeric"))
_RUNS_FROM = f"FROM {SCHEMA}.run_log"


def _runs_definition() -> str:
    """The view's SELECT as the server prints it, without its final semicolon."""
    found = (
        op.get_bind()
        .execute(sa.text("SELECT pg_get_viewdef('minruntime.runs'::regclass)"))
        .scalar_one()
    )
    return str(found).strip().rstrip(";")


def upgrade() -> None:
    for column, kind in _COLUMNS:
        op.execute(f"ALTER TABLE {SCHEMA}.run_log ADD COLUMN {column} {kind}")
    head, _, _ = _runs_definition().rpartition(_RUNS_FROM)
    added = ", ".join(f"run_log.{column}" for column, _ in _COLUMNS)
    op.execute(f"CREATE OR REPLACE VIEW minruntime.runs AS {head.rstrip()}, {added} {_RUNS_FROM}")


def downgrade() -> None:
    definition = re.sub(
        r",\s*run_log\.(last_checkpoint|gpu_seconds_since_checkpoint)\b", "", _runs_definition()
    )
    op.execute("DROP VIEW minruntime.runs")
    op.execute(f"CREATE VIEW minruntime.runs AS {definition}")
    op.execute("GRANT SELECT ON minruntime.runs TO minruntime_reader")
    for column, _ in _COLUMNS:
        op.execute(f"ALTER TABLE {SCHEMA}.run_log DROP COLUMN {column}")
