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

from alembic import op
from revision_parts import STATE, add_runs_columns, remake_runs, runs_definition

revision: str = "0022"
down_revision: str | None = "0021"

_COLUMNS = (("last_checkpoint", "timestamptz"), ("gpu_seconds_since_checkpoint", "numeric"))


def upgrade() -> None:
    for column, kind in _COLUMNS:
        op.execute(f"ALTER TABLE {STATE}.run_log ADD COLUMN {column} {kind}")
    add_runs_columns(", ".join(f"run_log.{column}" for column, _ in _COLUMNS))


def downgrade() -> None:
    definition = re.sub(
        r",\s*run_log\.(last_checkpoint|gpu_seconds_since_checkpoint)\b", "", runs_definition()
    )
    remake_runs(definition)
    for column, _ in _COLUMNS:
        op.execute(f"ALTER TABLE {STATE}.run_log DROP COLUMN {column}")
