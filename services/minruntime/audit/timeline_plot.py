"""The timeline picture of a podgroup's story (``minruntime audit UID --plot FILE``).

Time runs left to right (UTC). Four lanes, top to bottom: the podgroup's own events; its runs
as bars, each with its protection window shaded over it and the window's end marked (a
window replaced during the run by a queue or configuration change is drawn fainter, its end
dashed); the nominations; the requeue decisions — committed, rolled back and skipped with
their own markers — with the cooldown a commit wrote hatched up to its requeue-not-before.
Changes of the window during a run are dotted vertical lines labelled with what changed; a
run that ended while a window still protected it (against some possible preemptor, as the runs
view judged it) gets a dash-dotted line at its end, labelled a violation when an eviction
ended it.

Drawn with matplotlib's object API (no pyplot, no display): PNG through Agg, SVG with its
text kept as text, so the picture can be searched and tested.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

from minruntime.core import format_duration
from minruntime.errors import UserError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from minruntime.audit.timeline_model import Row, Run, Story

FORMATS: Final = {".png": "png", ".svg": "svg"}

# Lanes (y) and colours.
EVENTS, RUNS, NOMINATIONS, DECISIONS = 5.4, 3.9, 2.3, 1.0
_RUN: Final = "#4c72b0"
_WINDOW: Final = "#f2a03d"
_WINDOW_END: Final = "#c0392b"
_NOMINATION: Final = "#8e44ad"
_CHANGE: Final = "#7f7f7f"
# A run that ended while a window still protected it (a violation when an eviction ended it).
_INSIDE: Final = "#d62728"
# outcome -> (marker, colour, label)
_OUTCOMES: Final = {
    "committed": ("o", "#2ca02c", "committed"),
    "rolled_back": ("X", "#e67e22", "rolled back"),
    "skipped": ("s", "#95a5a6", "skipped"),
}
_TOP: Final = 6.75
_WIDTH_INCHES: Final = 13
# Label layout, in points: the estimated width of a character, one level's height, levels.
_CHAR_POINTS: Final = 4.9
_LEVEL_POINTS: Final = 11
_LEVELS: Final = 4


def plot_format(path: Path) -> str:
    """``png`` or ``svg`` from the file's suffix; UserError (one line) for any other."""
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise UserError(
            f"--plot {path}: the timeline is drawn as PNG or SVG; name the file .png or .svg"
        )
    return found


def write_plot(story: Story, path: Path) -> None:
    """Draw the story's timeline into ``path`` (PNG or SVG, by its suffix)."""
    image_format = plot_format(path)
    from matplotlib import rc_context

    # Text stays text in SVG; ids and the date are fixed so the same story gives the same file.
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": story.uid, "font.size": 8}):
        figure = _draw(story)
        try:
            figure.savefig(
                path,
                format=image_format,
                dpi=130,
                metadata={"Date": None} if image_format == "svg" else None,
            )
        except OSError as error:
            raise UserError(f"--plot {path}: cannot write it ({error.strerror})") from None


def _draw(story: Story) -> Figure:
    from matplotlib import dates
    from matplotlib.figure import Figure

    left, right = _extent(story)
    figure = Figure(figsize=(_WIDTH_INCHES, 7), layout="constrained")
    axes = figure.add_subplot()
    labels = _Labels(axes, left, right)
    for run in story.runs:
        _draw_run(axes, run, right)
    for row in story.rows:
        if row.kind == "window":
            axes.axvline(_x(row.time), color=_CHANGE, linestyle=":", linewidth=1.2)
            labels.place(row.time, _TOP, row.summary, _CHANGE, downward=True)
        elif row.nomination is not None:
            _draw_nomination(labels, row)
        elif row.decision is not None:
            _draw_decision(axes, labels, row)
        else:
            labels.mark(row.time, EVENTS, "|", _RUN, row.type.removeprefix("podgroup."))
    axes.set_xlim(_x(left), _x(right))
    axes.set_ylim(0.4, 6.8)
    axes.set_yticks([DECISIONS, NOMINATIONS, RUNS, EVENTS])
    axes.set_yticklabels(["decisions", "nominations", "runs", "events"])
    axes.xaxis_date(tz=UTC)
    # matplotlib.dates is not typed.
    locator = dates.AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    formatter = dates.ConciseDateFormatter(locator, tz=UTC)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_formatter(formatter)
    axes.set_xlabel("time (UTC)")
    axes.grid(axis="x", alpha=0.3)
    axes.set_title(_text(_title(story)), loc="left")
    _legend(figure)
    return figure


def _draw_run(axes: Axes, run: Run, right: datetime) -> None:
    end = run.end or right
    _bar(axes, run.start, end, RUNS, 0.36, color=_RUN, alpha=0.85)
    last = len(run.windows) - 1
    for index, window in enumerate(run.windows):
        current = index == last
        _bar(axes, run.start, window.protected_until, RUNS, 0.7, color=_WINDOW, alpha=0.35)
        axes.vlines(
            _x(window.protected_until),
            RUNS - 0.45,
            RUNS + 0.45,
            colors=_WINDOW_END if current else _CHANGE,
            linestyles="solid" if current else "dashed",
            linewidth=1.6 if current else 1.0,
        )
        source = f"queue {window.resolved_from}" if window.resolved_from else "default"
        label = (
            f"protected until {_clock(window.protected_until)} "
            f"({format_duration(window.min_runtime)}, {source})"
        )
        axes.text(
            _x(window.protected_until),
            RUNS - 0.55 - 0.25 * index,
            _text(label if current else f"replaced: {label}"),
            color=_WINDOW_END if current else _CHANGE,
            ha="left",
            va="top",
        )
    ending = run.ended_by or "still running"
    axes.text(_x(run.start), RUNS + 0.45, _text(f"run {run.number}"), ha="left", va="bottom")
    axes.text(_x(end), RUNS + 0.45, _text(ending), ha="right", va="bottom", color=_RUN)
    if run.end is not None and run.ended_inside_protection:
        _draw_inside(axes, run, run.end)


def _draw_inside(axes: Axes, run: Run, end: datetime) -> None:
    """The line where a run ended inside its window, and what it was (a violation or not)."""
    axes.axvline(_x(end), color=_INSIDE, linestyle="-.", linewidth=1.8)
    cut = f", cut {format_duration(run.cut_short)} short" if run.cut_short else ""
    what = f"violation ({run.protection})" if run.eviction else "ended inside its window"
    if run.exact_verdict is not None:
        # The scheduler said who evicted: the verdict under the one rule that applied.
        applied = run.applied_cut_short
        cut = f", cut {format_duration(applied)} short" if applied else ""
        what = f"{run.exact_verdict} ({run.action})"
    axes.text(_x(end), RUNS + 0.75, _text(f"{what}{cut}"), ha="right", va="bottom", color=_INSIDE)


def _draw_nomination(labels: _Labels, row: Row) -> None:
    assert row.nomination is not None
    label = f"nominated by {row.nomination.nominated_by}"
    if row.nomination.reason:
        label += f": {row.nomination.reason}"
    labels.mark(row.time, NOMINATIONS, "v", _NOMINATION, label)


def _draw_decision(axes: Axes, labels: _Labels, row: Row) -> None:
    decision = row.decision
    assert decision is not None
    marker, color, name = _OUTCOMES.get(decision.outcome, ("d", _CHANGE, decision.outcome))
    if decision.beneficiaries:
        label = f"{name} for {', '.join(decision.beneficiaries)}"
    else:
        label = f"{name}: {decision.reason}" if decision.reason else name
    labels.mark(row.time, DECISIONS, marker, color, label)
    not_before = decision.requeue_not_before
    if not_before is not None:
        # The cooldown: not requeued again before requeue-not-before.
        _bar(axes, row.time, not_before, DECISIONS, 0.3, color="none", edge=color, hatch="///")
        axes.vlines(_x(not_before), DECISIONS - 0.3, DECISIONS + 0.3, colors=color)
        label = f"requeue-not-before {_clock(not_before)}"
        labels.place(not_before, DECISIONS - 0.3, label, color, downward=True)


class _Labels:
    """Puts each label of a lane on the lowest level where it overlaps no earlier one."""

    def __init__(self, axes: Axes, left: datetime, right: datetime) -> None:
        self.axes = axes
        self.right = _x(right)
        # Axis units per point of text, for the figure's width (a label's width is estimated).
        self.per_point = (self.right - _x(left)) / (_WIDTH_INCHES * 72 * 0.88)
        self.taken: dict[float, list[list[tuple[float, float]]]] = {}

    def mark(self, at: datetime, lane: float, marker: str, color: str, label: str) -> None:
        self.axes.plot([_x(at)], [lane], marker=marker, color=color, markersize=9, ls="none")
        self.place(at, lane, label, color)

    def place(
        self, at: datetime, lane: float, label: str, color: str, *, downward: bool = False
    ) -> None:
        """The label next to ``at``: above the lane (below it when ``downward``); to the left
        of ``at`` when it would run out of the picture on the right."""
        x = _x(at)
        width = (len(label) * _CHAR_POINTS + 10) * self.per_point
        leftward = x + width > self.right
        span = (x - width, x) if leftward else (x, x + width)
        level = self._level(lane, span)
        offset = -(2 + _LEVEL_POINTS * level) if downward else 7 + _LEVEL_POINTS * level
        self.axes.annotate(
            _text(label),
            (x, lane),
            xytext=(-4 if leftward else 4, offset),
            textcoords="offset points",
            ha="right" if leftward else "left",
            va="top" if downward else "bottom",
            color=color,
        )

    def _level(self, lane: float, span: tuple[float, float]) -> int:
        levels = self.taken.setdefault(lane, [])
        for level, spans in enumerate(levels):
            if all(span[1] < start or span[0] > end for start, end in spans):
                spans.append(span)
                return level
        if len(levels) < _LEVELS:
            levels.append([span])
            return len(levels) - 1
        # Crowded: overlap on the lowest level rather than run into the next lane.
        levels[0].append(span)
        return 0


def _bar(
    axes: Axes,
    start: datetime,
    end: datetime,
    lane: float,
    height: float,
    *,
    color: str,
    alpha: float = 1.0,
    edge: str | None = None,
    hatch: str | None = None,
) -> None:
    width = max(_x(end) - _x(start), 0.0)
    axes.broken_barh(
        [(_x(start), width)],
        (lane - height / 2, height),
        facecolors=color,
        alpha=alpha,
        edgecolor=edge,
        hatch=hatch,
    )


def _legend(figure: Figure) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=_RUN, label="run"),
        Patch(color=_WINDOW, alpha=0.35, label="protection window (preempt)"),
        Line2D([], [], color=_WINDOW_END, label="protected until"),
        Patch(facecolor="none", edgecolor=_OUTCOMES["committed"][1], hatch="///", label="cooldown"),
        Line2D([], [], color=_NOMINATION, marker="v", linestyle="none", label="nomination"),
        *(
            Line2D([], [], color=color, marker=marker, linestyle="none", label=label)
            for marker, color, label in _OUTCOMES.values()
        ),
        Line2D([], [], color=_CHANGE, linestyle=":", label="window changed"),
        Line2D([], [], color=_INSIDE, linestyle="-.", label="ended inside its window"),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)


def _extent(story: Story) -> tuple[datetime, datetime]:
    moments = list(_moments(story))
    first, last = min(moments), max(moments)
    span = max(last - first, timedelta(minutes=10))
    return first - span * 0.04, last + span * 0.12


def _moments(story: Story) -> Iterable[datetime]:
    for row in story.rows:
        yield row.time
        if row.decision is not None and row.decision.requeue_not_before is not None:
            yield row.decision.requeue_not_before
    for run in story.runs:
        yield run.start
        yield from (window.protected_until for window in run.windows)
        if run.end is not None:
            yield run.end


def _title(story: Story) -> str:
    parts = (
        f"podgroup {story.uid}",
        story.name and f"{story.namespace}/{story.name}",
        story.queue and f"queue {story.queue}",
        story.node_pool and f"pool {story.node_pool}",
        story.status,
    )
    return " | ".join(part for part in parts if part)


def _x(moment: datetime) -> float:
    from matplotlib import dates

    return float(dates.date2num(moment))  # type: ignore[no-untyped-call]


def _clock(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%m-%d %H:%M:%S")


def _text(text: str) -> str:
    # "$" would start matplotlib's math mode; names and reasons are plain text.
    return text.replace("$", r"\$")
