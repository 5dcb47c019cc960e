"""The demo prints the design document's worked examples with the queue that supplied each."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time

from rich.console import Console

from minruntime.errors import UserError
from minruntime.stream.topic_guard import REFUSAL
from minruntime_dev.demo import RECLAIM_CASES, design_tree, run_demo
from minruntime_dev.demo_process import DemoChild


def _demo_text() -> str:
    console = Console(record=True, width=200, color_system=None)
    run_demo(console)
    return console.export_text()


def _row(text: str, *cells: str) -> bool:
    pattern = r"│\s*" + r"\s*│\s*".join(re.escape(c) for c in cells) + r"\s*│"
    return re.search(pattern, text) is not None


def test_reclaim_worked_examples_show_value_and_source() -> None:
    text = _demo_text()
    # SEMANTICS.md §4: leaf1→leaf3 = 60s (D); leaf1→leaf2 = 180s (leaf2); leaf3→leaf1 = 600s (B).
    assert _row(text, "leaf1", "leaf3", "1m", "D")
    assert _row(text, "leaf1", "leaf2", "3m", "leaf2")
    assert _row(text, "leaf3", "leaf1", "10m", "B", "0s", "leaf1")
    # Different roots use the victim's root; unknown queues fall back to the default.
    assert _row(text, "leaf1", "vision", "45s", "research", "15s", "vision")
    assert _row(text, "leaf1", "nowhere", "0s", "default", "0s", "default")


def test_preempt_worked_examples() -> None:
    text = _demo_text()
    # Preempt with B=600s, leaf1=300s: leaf1 → 300s, leaf2 → 600s (inherited from B).
    assert _row(text, "leaf1", "A → B → C → leaf1", "5m", "0s", "5m", "leaf1")
    assert _row(text, "leaf2", "A → B → C → leaf2", "unset", "3m", "10m", "B")
    assert _row(text, "A", "A", "unset", "unset", "0s", "default")


def test_protection_window_has_a_strict_boundary() -> None:
    text = _demo_text()
    assert _row(text, "start + 59.999999s", "protected")
    assert _row(text, "start + 60s", "reclaimable")


def test_every_case_names_known_or_deliberately_unknown_queues() -> None:
    tree = design_tree()
    for reclaimer, victim, _ in RECLAIM_CASES:
        assert reclaimer in tree
        assert victim in tree or victim == "nowhere"


def _child(script: str) -> DemoChild:
    stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by DemoChild.stop()
    process = subprocess.Popen([sys.executable, "-c", script], stderr=stderr)
    return DemoChild("processor", process, stderr)


def _first_error(child: DemoChild, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            child.check()
        except UserError as error:
            return str(error)
        time.sleep(0.05)
    raise AssertionError(f"no error from the child within {timeout}s")


def test_a_refused_topic_ends_the_demos_wait_at_once() -> None:
    """A processor refusing a topic waits for an operator: the demo says so in one line."""
    line = (
        "[2026-11-25 16:34:39,515] [23496] [ERROR] topic 'kai.nodes' is not the one its stored "
        f"offsets were read from (...); {REFUSAL}: `minruntime offsets rebaseline kai.nodes "
        "--from-start` (or --from-end)"
    )
    script = f"import sys, time; print({line!r}, file=sys.stderr, flush=True); time.sleep(60)"
    child = _child(script)
    try:
        message = _first_error(child)
        assert message.startswith("`minruntime processor`: topic 'kai.nodes' is not the one")
        assert message.endswith(
            "`minruntime offsets rebaseline kai.nodes --from-start` (or --from-end)"
        )
        assert "\n" not in message
    finally:
        child.stop()


def test_a_running_child_with_other_errors_is_waited_for() -> None:
    child = _child(
        "import sys, time; print('[ERROR] cannot reach Kafka', file=sys.stderr, flush=True); "
        "time.sleep(60)"
    )
    try:
        deadline = time.monotonic() + 30
        while not child.tail(1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.tail(1) == ["[ERROR] cannot reach Kafka"]
        child.check()  # still running, nothing an operator must do: the wait goes on
    finally:
        child.stop()


def test_a_refusal_is_found_however_much_the_child_logs_after_it() -> None:
    refusal = f"[ERROR] topic 'kai.queues' is gone; {REFUSAL}: rebaseline it"
    script = (
        f"import sys, time; print({refusal!r}, file=sys.stderr, flush=True); "
        "[print(f'[INFO] line {i}', file=sys.stderr, flush=True) for i in range(200)]; "
        "time.sleep(60)"
    )
    child = _child(script)
    try:
        deadline = time.monotonic() + 30
        while child.tail(1) != ["[INFO] line 199"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (
            _first_error(child)
            == f"`minruntime processor`: topic 'kai.queues' is gone; {REFUSAL}: rebaseline it"
        )
    finally:
        child.stop()
