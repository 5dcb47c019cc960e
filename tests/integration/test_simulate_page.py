"""The simulation's HTML page in a real headless browser: it renders without a console message
or a network request, and every number it shows is the JSON's."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from minruntime.audit.simulate_html import render_page
from minruntime.audit.simulate_model import describe
from tests.browser import render
from tests.integration.helpers import Feed
from tests.integration.test_simulate import LONGRUN_1H, SHORT_2H, change, run, story

_FIGURE = re.compile(r'data-figure="([^"]+)">([^<]*)<')


def value_at(data: dict[str, Any], path: str) -> Any:
    """The JSON value at a ``data-figure`` path: queues' names may hold dots, so the queue
    name is matched against the report's queues first."""
    head, _, rest = path.partition(".")
    if head == "queues":
        name = next(
            n for n in sorted(data["queues"], key=len, reverse=True) if rest.startswith(n + ".")
        )
        node: Any = data["queues"][name]
        rest = rest[len(name) + 1 :]
    else:
        node = data[head]
    for key in rest.split("."):
        node = node[key]
    return node


def shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_page_renders_cleanly_and_shows_the_jsons_numbers(
    engine: sa.Engine, feed: Feed, tmp_path: Path
) -> None:
    story(engine, feed)
    data = json.loads(json.dumps(describe(run(engine, change(LONGRUN_1H, SHORT_2H)))))
    page = tmp_path / "simulation.html"
    page.write_text(render_page(data), encoding="utf-8")

    rendered = render(page)

    assert rendered.console == []
    assert rendered.requests == []
    figures = _FIGURE.findall(rendered.dom)
    # The summary's figures for the total and both queues, and the log's counts.
    assert len(figures) > 3 * 20
    for path, text in figures:
        assert unescape(text) == shown(value_at(data, path)), path
    assert rendered.dom.count('class="flip"') == len(data["flips"]) == 1
    assert 'id="bars"' in rendered.dom
    assert 'id="timeline"' in rendered.dom
    for group, item in data["confidence"].items():
        assert f"<b>{group}</b>" in rendered.dom
        assert item["kind"] in rendered.dom


def test_the_browser_check_sees_a_console_error_and_a_network_request(tmp_path: Path) -> None:
    """The check above would fail on a broken page: the detector itself works."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<img src="http://example.invalid/x.png"><script>missing();</script></body></html>'
    )

    rendered = render(page)

    assert any("missing is not defined" in line for line in rendered.console)
    assert rendered.requests == ["http://example.invalid"]
