"""`simulate --html FILE`: the report as one self-contained page (no network, no script).

Made from the plain data ``simulate --json`` prints (``audit.simulate_model.describe``), so
the page's numbers are the JSON's: every figure cell carries ``data-figure`` (its path in the
JSON, ``total.violations.new.definite``), which the browser test compares. Inline CSS and
SVG only: a summary table, per-queue bars (violations added and avoided, GPU-hours lost
before and after), a timeline strip of the flipped decisions, the notes and the confidence
of each figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape
from typing import Any, Final

from minruntime.core import parse_rfc3339

_STYLE: Final = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td.name,th.name{text-align:left}
.note{color:#7a4b00}.exact{color:#1a6b2a}.estimate{color:#8a5a00}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:-1px}
svg text{font:12px system-ui,sans-serif}
"""
_COLOURS: Final = {
    "new": "#c0392b",
    "avoided": "#27ae60",
    "lost_before": "#7f8c8d",
    "lost_after": "#2980b9",
    "protected_before": "#bdc3c7",
    "protected_after": "#8e44ad",
    "to_committed": "#c0392b",
    "from_committed": "#27ae60",
}
_ROWS: Final = (
    ("Evicted runs", "violations.evicted_runs", "violations"),
    ("New violations, definite", "violations.new.definite", "violations"),
    ("New violations, possible", "violations.new.possible", "violations"),
    ("Violations avoided, definite", "violations.avoided.definite", "violations"),
    ("Violations avoided, possible", "violations.avoided.possible", "violations"),
    ("GPU-hours lost to violations, recorded", "gpu_hours_lost.before", "gpu_hours_lost"),
    ("GPU-hours lost to violations, under the change", "gpu_hours_lost.after", "gpu_hours_lost"),
    ("Decisions judged", "flips_from_committed.decisions", "flips_from_committed"),
    ("Commits that would roll back", "flips_from_committed.to_rolled_back", "flips_from_committed"),
    ("Commits that would be skipped", "flips_from_committed.to_skipped", "flips_from_committed"),
    ("Rollbacks/skips that would commit", "flips_to_committed.to_committed", "flips_to_committed"),
    ("Requeue GPU-hours saved", "requeue_gpu_hours.saved", "requeue_gpu_hours"),
    ("Requeue GPU-hours added", "requeue_gpu_hours.added", "requeue_gpu_hours"),
    ("Wait added for beneficiaries (hours)", "wait.added_hours", "wait"),
    ("Runs judged for protection time", "protection.runs", "protection"),
    ("Runs protected longer", "protection.longer", "protection"),
    ("Runs protected shorter", "protection.shorter", "protection"),
    ("GPU-hours under protection, recorded", "protection.gpu_hours_before", "protection"),
    ("GPU-hours under protection, under the change", "protection.gpu_hours_after", "protection"),
    ("GPU-hours fully protected, recorded", "protection.full_gpu_hours_before", "protection"),
    (
        "GPU-hours fully protected, under the change",
        "protection.full_gpu_hours_after",
        "protection",
    ),
)


def render_page(data: dict[str, Any]) -> str:
    queues: dict[str, Any] = data["queues"]
    title = f"minruntime simulate {data['since']} .. {data['until']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<link rel="icon" href="data:,">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        _change(data),
        "<h2>Summary</h2>",
        _summary(data["total"], queues, data["confidence"]),
        "<h2>Per queue</h2>",
        _bars(queues),
        "<h2>Flipped decisions</h2>",
        _timeline(data),
        "<h2>Notes</h2>",
        _list([escape(note) for note in data["notes"]] or ["none"], "note"),
        "<h2>Confidence</h2>",
        _list(
            [
                f'<b>{escape(group)}</b>: <span class="{escape(item["kind"])}">'
                f"{escape(item['kind'])}</span> — {escape(item['why'])}"
                for group, item in data["confidence"].items()
            ]
        ),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _change(data: dict[str, Any]) -> str:
    log = data["log"]
    items = [
        f"{escape(item['type'])} {escape(str(item['subject']))} "
        f"<small>[from {escape(item['origin'])}]</small>"
        for item in data["change"]
    ]
    read = (
        f'<p>Log: <span data-figure="log.read">{log["read"]}</span> entries read, '
        f'<span data-figure="log.in_window">{log["in_window"]}</span> in the window, '
        f'<span data-figure="log.skipped">{log["skipped"]}</span> skipped, '
        f'<span data-figure="log.dead_letters">{log["dead_letters"]}</span> dead-lettered. '
        "Nothing was written.</p>"
    )
    return "<p>The change:</p>" + _list(items) + read


def _summary(total: dict[str, Any], queues: dict[str, Any], confidence: dict[str, Any]) -> str:
    names = list(queues)
    head = "".join(f"<th>{escape(name)}</th>" for name in names)
    rows = [
        f'<table id="summary"><tr><th class="name">figure</th><th>confidence</th>'
        f"<th>total</th>{head}</tr>"
    ]
    for label, path, group in _ROWS:
        kind = confidence[group]["kind"]
        cells = [_cell(f"total.{path}", _get(total, path))]
        cells += [_cell(f"queues.{name}.{path}", _get(queues[name], path)) for name in names]
        rows.append(
            f'<tr><td class="name">{escape(label)}</td>'
            f'<td class="{escape(kind)}">{escape(kind)}</td>{"".join(cells)}</tr>'
        )
    rows.append("</table>")
    return "".join(rows)


def _cell(path: str, value: Any) -> str:
    return f'<td data-figure="{escape(path)}">{escape(_number(value))}</td>'


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _get(figures: dict[str, Any], path: str) -> Any:
    value: Any = figures
    for key in path.split("."):
        value = value[key]
    return value


def _bars(queues: dict[str, Any]) -> str:
    if not queues:
        return "<p>No queue has a run or a decision in the window.</p>"
    series = _SERIES
    label_width, bar_width, row = 160, 420, 16
    height = len(queues) * (row * len(series) + 10) + 10
    values = {
        name: [float(sum(_get(figures, path) for path in paths)) for _, _, paths in series]
        for name, figures in queues.items()
    }
    largest_count = max((max(bars[:2]) for bars in values.values()), default=0) or 1
    largest_hours = max((max(bars[2:]) for bars in values.values()), default=0) or 1
    out = [
        f'<svg id="bars" width="{label_width + bar_width + 80}" height="{height}" '
        'xmlns="http://www.w3.org/2000/svg">'
    ]
    y = 10
    for name, bars in values.items():
        out.append(f'<text x="0" y="{y + 12}">{escape(name)}</text>')
        for index, ((key, label, _), value) in enumerate(zip(series, bars, strict=True)):
            scale = largest_count if index < 2 else largest_hours
            width = 0 if not value else max(1, round(bar_width * value / scale))
            out.append(
                f'<rect x="{label_width}" y="{y}" width="{width}" height="{row - 3}" '
                f'fill="{_COLOURS[key]}"><title>{escape(label)}: {_number(value)}</title></rect>'
                f'<text x="{label_width + width + 4}" y="{y + 11}" data-bar="{escape(name)}.{key}">'
                f"{escape(_number(value))}</text>"
            )
            y += row
        y += 10
    out.append("</svg>")
    legend = "".join(
        f'<span style="background:{_COLOURS[key]}"></span>{escape(label)}'
        for key, label, _ in series
    )
    return f'<div class="legend">{legend}</div>' + "".join(out)


# Per-queue bars: (colour key, label, the figures they add up); the first two are counts, the
# others GPU-hours.
_SERIES: Final = (
    ("new", "violations added", ("violations.new.definite", "violations.new.possible")),
    (
        "avoided",
        "violations avoided",
        ("violations.avoided.definite", "violations.avoided.possible"),
    ),
    ("lost_before", "GPU-h lost, recorded", ("gpu_hours_lost.before",)),
    ("lost_after", "GPU-h lost, changed", ("gpu_hours_lost.after",)),
    ("protected_before", "GPU-h protected, recorded", ("protection.gpu_hours_before",)),
    ("protected_after", "GPU-h protected, changed", ("protection.gpu_hours_after",)),
)


def _timeline(data: dict[str, Any]) -> str:
    flips: Sequence[dict[str, Any]] = data["flips"]
    if not flips:
        return "<p>No decision would flip.</p>"
    since, until = parse_rfc3339(data["since"]), parse_rfc3339(data["until"])
    width, left = 700, 10
    span = max((until - since).total_seconds(), 1.0)

    def x(at: datetime) -> float:
        return left + width * min(max((at - since).total_seconds() / span, 0.0), 1.0)

    out = [
        f'<svg id="timeline" width="{width + 2 * left}" height="56" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{left}" y1="28" x2="{left + width}" y2="28" stroke="#999"/>',
        f'<text x="{left}" y="52">{escape(data["since"])}</text>',
        f'<text x="{left + width}" y="52" text-anchor="end">{escape(data["until"])}</text>',
    ]
    for flip in flips:
        key = "to_committed" if flip["after"] == "committed" else "from_committed"
        at = x(parse_rfc3339(flip["at"]))
        title = (
            f"{flip['at']} {flip['uid']} ({flip['queue']}): {flip['before']} -> "
            f"{flip['after']} {flip['after_reason'] or ''} [{flip['confidence']}]"
        )
        out.append(
            f'<rect class="flip" x="{at - 2:.1f}" y="14" width="4" height="28" '
            f'fill="{_COLOURS[key]}"><title>{escape(title)}</title></rect>'
        )
    out.append("</svg>")
    rows = "".join(
        f'<tr><td>{escape(f["at"])}</td><td class="name">{escape(f["uid"])}</td>'
        f'<td class="name">{escape(f["queue"])}</td>'
        f'<td class="name">{escape(f["before"])} {escape(f["before_reason"] or "")}</td>'
        f'<td class="name">{escape(f["after"])} {escape(f["after_reason"] or "")}</td>'
        f'<td class="{escape(f["confidence"])}">{escape(f["confidence"])}</td>'
        f"<td>{'' if f['gpu_hours'] is None else escape(_number(f['gpu_hours']))}</td></tr>"
        for f in flips
    )
    table = (
        '<table id="flips"><tr><th>at</th><th class="name">uid</th><th class="name">queue</th>'
        '<th class="name">recorded</th><th class="name">under the change</th>'
        f"<th>confidence</th><th>GPU-h</th></tr>{rows}</table>"
    )
    legend = (
        f'<div class="legend"><span style="background:{_COLOURS["from_committed"]}"></span>'
        f'a commit that would not happen<span style="background:{_COLOURS["to_committed"]}">'
        "</span>a requeue that would happen</div>"
    )
    return legend + "".join(out) + table


def _list(items: Sequence[str], css: str = "") -> str:
    attribute = f' class="{css}"' if css else ""
    return f"<ul{attribute}>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"
