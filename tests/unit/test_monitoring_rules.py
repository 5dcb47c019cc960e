"""deploy/monitoring/: the rule file passes `promtool check rules` and its unit tests, every
alert has a severity, a runbook section and promtool cases that fire it and that must not; the
runbook's commands parse; the dashboard's queries are well formed.

promtool is `minruntime stack tool promtool` (built once with Go into the cache; scripts/test.sh
builds it before pytest). Which metrics the expressions name, against the real processes, is
tests/e2e/test_monitoring_metrics.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from minruntime.settings import Settings
from minruntime_dev.stack.gotools import PROMTOOL, ensure_tool
from tests.manifests import assert_a_real_minruntime_command
from tests.monitoring import (
    POSTGRES_SOURCE,
    PROMETHEUS_SOURCE,
    RULE_TESTS,
    RULES,
    RUNBOOK,
    Family,
    alerts,
    anchor,
    code_blocks,
    dashboard,
    families,
    family_of,
    metric_names,
    panels,
    runbook_sections,
    targets,
)

SEVERITIES = {"warning", "critical"}


@pytest.fixture(scope="module")
def promtool(settings: Settings) -> Path:
    return ensure_tool(settings, PROMTOOL, say=lambda line: print(line, file=sys.stderr))


def run(promtool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_promtool_checks_the_rule_file(promtool: Path) -> None:
    done = run(promtool, "check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]  # alerts and records
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_promtool_unit_tests_pass(promtool: Path) -> None:
    files = sorted(RULE_TESTS.glob("*.yaml"))
    assert files
    done = run(promtool, "test", "rules", *files)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_fails_a_wrong_expectation(promtool: Path, tmp_path: Path) -> None:
    """The check above would notice: a case that expects the wrong annotation fails."""
    case = yaml.safe_load((RULE_TESTS / "outbox.yaml").read_text())
    case["rule_files"] = [str(RULES)]
    expected = case["tests"][0]["alert_rule_test"][1]["exp_alerts"][0]["exp_annotations"]
    expected["summary"] = expected["summary"].replace("15m 0s", "14m 0s")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(case))
    done = run(promtool, "test", "rules", wrong)
    assert done.returncode != 0
    assert "14m 0s" in done.stdout + done.stderr


def test_every_alert_has_a_severity_a_summary_and_its_own_runbook_section() -> None:
    sections = runbook_sections()
    names = [rule["alert"] for rule in alerts()]
    assert len(names) == len(set(names))
    for rule in alerts():
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/operations.md#{anchor(name)}", name
        assert anchor(name) in sections, f"docs/operations.md has no section for {name}"
        body = sections[anchor(name)]
        for part in ("**Means.**", "**Look at.**", "**Do.**"):
            assert part in body, f"{name}'s runbook section lacks {part}"


def test_every_alert_has_promtool_cases_that_fire_it_and_that_must_not() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in sorted(RULE_TESTS.glob("*.yaml")):
        suite = yaml.safe_load(path.read_text())
        assert suite["rule_files"] == ["../minruntime-rules.yaml"], path
        for case in suite["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names - fired == set(), "alerts no promtool case fires"
    assert names - quiet == set(), "alerts no promtool case expects to stay quiet"
    assert fired | quiet <= names, "promtool cases of alerts that do not exist"


def test_every_section_of_the_runbook_table_links_an_alert() -> None:
    table = re.findall(r"^\| \[(\w+)\]\(#(\w+)\) \| (\w+) \|", RUNBOOK.read_text(), re.M)
    by_name = {rule["alert"]: rule for rule in alerts()}
    assert [name for name, _, _ in table] == list(by_name)
    for name, link, severity in table:
        assert link == anchor(name)
        assert by_name[name]["labels"]["severity"] == severity


def test_the_runbooks_commands_are_real_minruntime_commands() -> None:
    commands = [
        line.split("#")[0].split()
        for block in code_blocks(RUNBOOK.read_text(), "bash")
        for line in block.splitlines()
        if line.startswith("minruntime ")
    ]
    assert len(commands) >= 5
    for words in commands:
        assert_a_real_minruntime_command(words[1:], "docs/operations.md")


def test_the_runbooks_sql_names_only_views_and_tables_that_exist() -> None:
    """The statements run for real in tests/e2e/test_monitoring_metrics.py; here, cheaply,
    that each names a view of the read surface or a table of the state schema."""
    from minruntime.store.tables import metadata

    migrations = "".join(
        path.read_text() for path in (RUNBOOK.parents[1] / "migrations").rglob("*.py")
    )
    tables = {table.name for table in metadata.tables.values()}
    for block in code_blocks(RUNBOOK.read_text(), "sql"):
        for schema, name in re.findall(r"\b(minruntime(?:_state)?)\.(\w+)", block):
            if schema == "minruntime":
                assert f"VIEW minruntime.{name}" in migrations, name
            else:
                assert name in tables, name


# -- PromQL ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('sum by (role) (rate(a_total{kind="x", role=~"p.*"}[5m])) > 1', {"a_total"}),
        ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval])))", {"h_bucket"}),
        ("sum(a) without (instance) / on (role) group_left (kind) b offset 1h30m", {"a", "b"}),
        ("a > bool 1e3 and b @ start() unless c or vector(0)", {"a", "b", "c"}),
        ('label_replace(a, "dst", "$1", "src", "(by|on) x")', {"a"}),
        ('count_values("value", a) * on() group_left b', {"a", "b"}),
        ("time() - max(t) > 3600 or absent(r{component='processor'})", {"t", "r"}),
        ("sum(increase(c[${__range}])) by (reason) > 0 < inf", {"c"}),
        ("max_over_time(deriv(g[10m:1m])[1h:]) > -.5", {"g"}),
    ],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_a_name_resolves_to_a_declared_family_samples_or_not() -> None:
    registry = CollectorRegistry()
    Counter("a_things", "Things.", ["kind"], registry=registry)  # counted nothing yet
    Histogram("b_seconds", "Time.", ["role"], registry=registry)
    Gauge("c", "Level.", registry=registry)
    declared = families(generate_latest(registry).decode())
    assert declared["a_things_total"] == Family(help=True, type="counter")
    resolved = {
        name: family_of(name, declared)
        for name in ("a_things_total", "a_things", "b_seconds_bucket", "b_seconds_count", "c")
    }
    assert resolved == {
        "a_things_total": "a_things_total",
        "a_things": None,  # a counter's series are its _total
        "b_seconds_bucket": "b_seconds",
        "b_seconds_count": "b_seconds",
        "c": "c",
    }
    assert family_of("b_seconds", declared) is None  # a histogram has no series of that name
    assert family_of("c_bucket", declared) is None


def test_every_alert_expression_reads_a_service_metric() -> None:
    for rule in alerts():
        found = metric_names(rule["expr"])
        assert found, rule["alert"]
        assert all(name.startswith(("minruntime_", "kai_")) for name in found), found


# -- the dashboard -------------------------------------------------------------------------------


def _variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard()["templating"]["list"]}


def test_the_dashboard_asks_for_its_two_data_sources() -> None:
    variables = _variables()
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["postgres"]["query"] == "grafana-postgresql-datasource"


def test_every_panel_queries_through_a_data_source_variable() -> None:
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))
    queried = [p for p in panels() if p["type"] != "row"]
    assert queried
    for panel in queried:
        assert panel["description"], panel["title"]
        assert panel["targets"], panel["title"]
    for target in targets():
        if target.datasource == PROMETHEUS_SOURCE:
            assert target.expr, target
            assert not target.sql, target
            assert metric_names(target.expr), target
        else:
            assert target.datasource == POSTGRES_SOURCE, target
            assert target.sql, target
            assert not target.expr, target
            assert "minruntime_state" not in target.sql, "the reader role sees only the views"


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    read = {name for target in targets() if target.expr for name in metric_names(target.expr)}
    sql = " ".join(target.sql for target in targets())
    assert {"minruntime_events_applied_total", "minruntime_consumer_lag"} <= read  # ingest, lag
    assert "minruntime_events_dead_lettered_total" in read  # dead letters by kind
    assert "minruntime_requeue_decisions_total" in read  # decisions by outcome and reason
    assert "minruntime.preempt_protection" in sql  # protected podgroups
    assert {"minruntime_outbox_backlog", "minruntime_outbox_oldest_age_seconds"} <= read


def test_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in panels():
        pos = panel["gridPos"]
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        assert not cells & taken, panel["title"]
        taken |= cells
