"""What the migrations execute, step by step: to show a reshaped revision still does the same.

    .venv/bin/python scripts/migration_fingerprint.py OUT   # on the local stack

On a scratch database: upgrade one revision at a time to the head, then downgrade one at a
time to the base (the stairway of tests/integration/test_migrations.py). Writes
``OUT/statements.sql``, every statement sent to PostgreSQL in order with its parameters, and
``OUT/dump-NNN-<step>.sql``, ``pg_dump --schema-only`` after each step (the scratch
database's name replaced by ``SCRATCH``). Run it before and after a change to migrations/ and
compare: ``diff -r BEFORE AFTER`` prints nothing when the revisions execute the very same SQL.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.script import ScriptDirectory

from minruntime.pgurl import PgAddress
from minruntime.settings import Settings
from minruntime.store.migrate import alembic_config, downgrade, upgrade
from minruntime_dev.scratch import (
    create_scratch_database,
    drop_scratch_database,
    scratch_owner_url,
)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    settings = Settings()
    url = create_scratch_database(settings, "minruntime_test_fingerprint")
    owner = scratch_owner_url(settings, url)
    name = PgAddress.parse(owner).dbname or ""
    script = ScriptDirectory.from_config(alembic_config(settings))
    steps = [r.revision for r in reversed(list(script.walk_revisions()))]
    dumps = 0
    with (out / "statements.sql").open("w") as log:

        def record(*args: Any) -> None:
            statement, parameters = args[2], args[3]
            log.write(f"-- params {parameters!r}\n{statement}\n;;\n")

        def dump(step: str) -> None:
            nonlocal dumps
            dumps += 1
            log.write(f"-- ===== {step}\n")
            log.flush()
            found = subprocess.run(
                ["pg_dump", "--schema-only", owner], check=True, capture_output=True, text=True
            ).stdout
            found = re.sub(r"\\(un)?restrict \S+", "", found.replace(name, "SCRATCH"))
            (out / f"dump-{dumps:03d}-{step}.sql").write_text(found)

        sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
        try:
            for revision in steps:
                upgrade(owner, revision)
                dump(f"up-{revision}")
            for revision in reversed(steps[:-1]):
                downgrade(owner, revision)
                dump(f"down-{revision}")
            downgrade(owner, "base")
            dump("down-base")
        finally:
            sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)
            drop_scratch_database(settings, url)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
