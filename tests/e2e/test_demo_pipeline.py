"""`minruntime demo` drives the real pipeline and answers with SQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from minruntime.settings import Settings
from minruntime.stack import StackStatus
from tests.conftest import run_cli
from tests.e2e.harness import Pipeline

pytestmark = pytest.mark.stack


def _row(text: str, *cells: str) -> bool:
    pattern = r"│\s*" + r"\s*│\s*".join(cells) + r"\s*│"
    return re.search(pattern, text) is not None


def test_demo_runs_the_pipeline_and_shows_sql_answers(
    stack: StackStatus, settings: Settings, tmp_path: Path
) -> None:
    pipeline = Pipeline(settings, tmp_path, "demo").create()
    try:
        result = run_cli("demo", "--width", "200", env=pipeline.env, timeout=240)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "FROM minruntime.reclaim_protection('leaf1')" in out  # the query is shown
        uid = r"demo-[0-9a-f]{4}"
        # Reclaim from leaf1: a leaf3 job is protected by D's 60s; preempt: B's 10m.
        assert _row(out, f"{uid}-train-a", "leaf3", "1m", "D"), out
        assert _row(out, f"{uid}-train-a", "leaf3", "10m", "B"), out
        # The elastic job (4 pods, minAvailable 2) may lose 2 pods while protected.
        assert _row(out, f"{uid}-elastic", "leaf2", "10m", "B", r"\S+", "true", "2"), out
        assert _row(out, r"kai\.queues\.\S+", "bad_duration", r".*1h-30m.*"), out
        assert pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters") == 1
        # The demo's own processor (`python -m minruntime.cli processor`) is not left running.
        assert "minruntime.cli processor" not in _processes()
    finally:
        pipeline.drop()


def _processes() -> str:
    return "\n".join(
        p.read_text(errors="replace").replace("\0", " ")
        for p in Path("/proc").glob("[0-9]*/cmdline")
        if p.exists()
    )
