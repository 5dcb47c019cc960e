"""The demo prints the design document's worked examples with the queue that supplied each."""

from __future__ import annotations

import re

from rich.console import Console

from minruntime.demo import RECLAIM_CASES, design_tree, run_demo


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
