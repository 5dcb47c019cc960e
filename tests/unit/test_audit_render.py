"""Rendering a podgroup's story (`minruntime audit`): table, JSON and the timeline picture.

The story is built by hand here; tests/integration/test_audit_timeline.py builds real ones
from an event log.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from minruntime.audit.timeline_model import (
    Change,
    Decision,
    Nomination,
    Row,
    Run,
    Story,
    Window,
    WindowSpan,
)
from minruntime.audit.timeline_plot import plot_format, write_plot
from minruntime.audit.timeline_text import describe_event
from minruntime.cli import main
from minruntime.commands.audit import render_story, story_json
from minruntime.commands.render import print_json
from minruntime.errors import UserError
from minruntime.events import new_event
from tests.cloudevents import T0

H = timedelta(hours=1)


def row(seq: int, time: datetime, type_: str, kind: str, summary: str, **kw: object) -> Row:
    fields: dict[str, object] = {
        "changes": (),
        "status": "running",
        "running_pods": 2,
        "run_start": T0,
        "run": 1,
        "window": Window(H, "team", T0 + H, time < T0 + H),
    }
    fields.update(kw)
    return Row(seq, time, time, type_, kind, summary, **fields)


def story() -> Story:
    committed = Decision(
        "d-2", "committed", None, ("expectedruntime",), ("hi",), T0 + 3 * H, None, T0
    )
    rolled_back = Decision("d-1", "rolled_back", "protected", ("proportion",), (), None, None, T0)
    return Story(
        uid="pg-7",
        name="train",
        namespace="ml",
        queue="team",
        node_pool="default",
        priority=50,
        status="finished",
        rows=(
            row(1, T0, "podgroup.allocated", "podgroup", "allocated 2 pods on n1",
                changes=(Change("status", "pending", "running"),)),
            row(2, T0 + H / 4, "queue.upserted", "window",
                "window changed: queue team preemptMinRuntime 30m→1h",
                changes=(Change("min_runtime", H / 2, H),)),
            row(3, T0 + H / 2, "requeue.nominated", "nomination", "nominated by proportion",
                nomination=Nomination("proportion", "over quota")),
            row(4, T0 + H / 2, "requeue.rolled-back", "decision",
                "requeue rolled back: protected (nominated by proportion)",
                decision=rolled_back),
            row(5, T0 + 2 * H, "requeue.committed", "decision", "requeue committed",
                decision=committed),
            row(6, T0 + 2 * H, "podgroup.released", "podgroup", "released all pods",
                status="finished", running_pods=0, run_start=None, window=None),
        ),
        runs=(
            Run(1, T0, T0 + 2 * H, "requeued", (
                WindowSpan(T0, H / 2, "team", T0 + H / 2),
                WindowSpan(T0 + H / 4, H, "team", T0 + H),
            )),
        ),
        replayed=9,
    )  # fmt: skip


def test_the_table_shows_rows_windows_and_runs() -> None:
    console = Console(record=True, width=300)
    render_story(console, story())
    text = console.export_text()
    assert "podgroup pg-7  ml/train  queue team, pool default, priority 50, now finished" in text
    assert "window changed: queue team preemptMinRuntime 30m→1h" in text
    assert "min runtime 30m → 1h" in text
    assert "1h (queue team)" in text
    assert "requeue rolled back: protected" in text
    # The run's two windows, the second from the change on.
    assert "30m (queue team)" in text
    assert "1h (queue team) from 2026-11-21T10:15:00Z" in text
    assert "requeued" in text


def test_json_is_the_story_field_for_field(capsys: pytest.CaptureFixture[str]) -> None:
    print_json(story_json(story()))
    data = json.loads(capsys.readouterr().out)
    assert data["uid"] == "pg-7"
    assert [r["kind"] for r in data["rows"]] == [
        "podgroup", "window", "nomination", "decision", "decision", "podgroup"
    ]  # fmt: skip
    assert data["rows"][1]["changes"] == [
        {"field": "min_runtime", "before": 1800.0, "after": 3600.0}
    ]
    assert data["rows"][4]["decision"]["requeue_not_before"] == "2026-11-21T13:00:00Z"
    assert data["runs"][0]["protected_until"] == "2026-11-21T11:00:00Z"


def test_png_and_svg_by_suffix(tmp_path: Path) -> None:
    png, svg = tmp_path / "s.PNG", tmp_path / "s.svg"
    write_plot(story(), png)
    write_plot(story(), svg)
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert png.stat().st_size > 20_000
    text = " ".join(ET.parse(svg).getroot().itertext())
    for label in ("pg-7", "committed for hi", "rolled back: protected", "requeue-not-before"):
        assert label in text, label
    # The same story draws the same SVG.
    again = tmp_path / "again.svg"
    write_plot(story(), again)
    assert again.read_bytes() == svg.read_bytes()


@pytest.mark.parametrize("name", ["s.pdf", "s", "s.svg.gz"])
def test_other_suffixes_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(UserError, match=r"name the file \.png or \.svg"):
        plot_format(Path(name))


def test_the_cli_refuses_a_bad_suffix_before_reading_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No database is needed to say so: the suffix is checked first.
    assert main(["audit", "pg-7", "--plot", "story.jpg"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("minruntime: error: --plot story.jpg:")


def test_an_unwritable_picture_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot write it"):
        write_plot(story(), tmp_path / "missing-dir" / "s.png")


def test_a_release_line_says_who_evicted_when_the_scheduler_did() -> None:
    plain = new_event("podgroup.released", {"uid": "pg", "reason": "deleted"}, time=T0)
    assert describe_event(plain, plain.type) == "released all pods (deleted)"
    attributed = new_event(
        "podgroup.released",
        {
            "uid": "pg",
            "reason": "deleted",
            "eviction": {
                "source": "event",
                "action": "Reclaim",
                "evictor": "team/urgent",
                "evictorQueue": "leaf3",
                "at": "2026-11-21T10:01:40Z",
            },
        },
        time=T0,
    )
    assert describe_event(attributed, attributed.type) == (
        "released all pods (deleted), evicted by reclaim for team/urgent (queue leaf3)"
        " at 2026-11-21T10:01:40Z [event]"
    )
