"""deploy/monitoring/ as its tests read it: the alerting rules, the Grafana dashboard, the
runbook (docs/operations.md), the metric names a PromQL expression reads, and the metric
families a `/metrics` page (or a textfile) declares."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from tests.conftest import ROOT

MONITORING: Final = ROOT / "deploy" / "monitoring"
RULES: Final = MONITORING / "minruntime-rules.yaml"
RULE_TESTS: Final = MONITORING / "tests"
DASHBOARD: Final = MONITORING / "minruntime-dashboard.json"
RUNBOOK: Final = ROOT / "docs" / "operations.md"

PROMETHEUS_SOURCE: Final = "${datasource}"
POSTGRES_SOURCE: Final = "${postgres}"


def alerts() -> list[dict[str, Any]]:
    """Every alerting rule of the rule file, in order."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


@dataclass(frozen=True)
class Target:
    """One query of a dashboard panel: PromQL (``expr``) or SQL (``sql``)."""

    panel: str
    datasource: str
    expr: str = ""
    sql: str = ""


def dashboard() -> dict[str, Any]:
    """The dashboard's JSON model."""
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(model: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows included."""
    for panel in (model or dashboard())["panels"]:
        yield panel
        yield from panel.get("panels", [])


def targets() -> list[Target]:
    """Every query of every panel."""
    found = []
    for panel in panels():
        for target in panel.get("targets", []):
            source = target.get("datasource", panel.get("datasource", {})).get("uid", "")
            found.append(
                Target(panel["title"], source, target.get("expr", ""), target.get("rawSql", ""))
            )
    return found


# -- PromQL: the metric names an expression reads ---------------------------------------------

# Not metric names: keywords, and the words before a parenthesised label list.
_KEYWORDS: Final = frozenset(
    {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "group_left", "group_right"}
)
_LABEL_LISTS: Final = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_STRINGS: Final = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS: Final = re.compile(r"\{[^{}]*\}")  # label matchers (their strings are gone)
_RANGES: Final = re.compile(r"\[[^\[\]]*\]")  # [5m], [$__rate_interval], [1h:5m]
_VARIABLES: Final = re.compile(r"\$\{[^}]*\}|\$\w+")  # Grafana's template variables
_TOKENS: Final = re.compile(
    r"(?P<number>\d[\w.]*|\.\d[\w.]*)|(?P<name>[A-Za-z_:][\w:]*)|(?P<other>\S)"
)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions,
    aggregations, keywords, label names (in matchers or in by/without/on/ignoring/group_*
    lists) nor parts of numbers or durations."""
    text = _STRINGS.sub('""', expr)
    if "__name__" in text:
        raise ValueError(f"select metrics by name, not by __name__: {expr}")
    text = _VARIABLES.sub(" ", _RANGES.sub(" ", _MATCHERS.sub(" ", text)))
    tokens = [(m.lastgroup, m.group()) for m in _TOKENS.finditer(text)]
    names: set[str] = set()
    index = 0
    while index < len(tokens):
        kind, word = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        index += 1
        if kind != "name":
            continue
        if word in _LABEL_LISTS and following == "(":
            index = _closing(tokens, index)
        elif word in _KEYWORDS or word in _LABEL_LISTS:
            continue
        elif following not in ("(", "by", "without"):  # not a function nor `sum by (...)`
            names.add(word)
    return names


def _closing(tokens: list[tuple[str | None, str]], opening: int) -> int:
    """The index after the `)` that closes the `(` at ``opening``."""
    for index in range(opening, len(tokens)):
        if tokens[index] == ("other", ")"):
            return index + 1
    raise ValueError("a label list is not closed")


# -- the exposition format: families declared by # HELP and # TYPE ------------------------------


@dataclass
class Family:
    """One metric family of a scrape: whether it has its # HELP, and its # TYPE."""

    help: bool = False
    type: str = ""


_SUFFIXES: Final = {
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
}


def families(exposition: str) -> dict[str, Family]:
    """Every family a text-format page declares, samples or not (a labelled counter that has
    counted nothing yet still has its # HELP and # TYPE lines)."""
    found: dict[str, Family] = {}
    for line in exposition.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) >= 3 and parts[0] == "#" and parts[1] in ("HELP", "TYPE"):
            family = found.setdefault(parts[2], Family())
            if parts[1] == "HELP":
                family.help = True
            else:
                family.type = parts[3] if len(parts) > 3 else ""
    return found


def family_of(name: str, declared: Mapping[str, Family]) -> str | None:
    """The declared family a PromQL metric name belongs to: itself (a counter's family is
    declared with its `_total` in the text format), or a histogram's or summary's family for
    its `_bucket`, `_sum` and `_count` series."""
    if name in declared and declared[name].type not in _SUFFIXES:
        return name
    for family, declaration in declared.items():
        if any(name == family + suffix for suffix in _SUFFIXES.get(declaration.type, ())):
            return family
    return None


# -- the runbook --------------------------------------------------------------------------------


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """Anchor -> the text of each `## ` section of docs/operations.md."""
    sections: dict[str, str] = {}
    current = ""
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("## "):
            current = anchor(line[3:])
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    return sections


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of one language."""
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)
