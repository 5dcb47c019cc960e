"""`minruntime replay`: rebuild every projection from the event log; verify it against live."""

from __future__ import annotations

import functools
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from minruntime.audit.rebuild import Rebuild, Rebuilt, drop_kept, rebuild
from minruntime.audit.replay import Progress as Advance
from minruntime.audit.replay import ReplayReport, describe
from minruntime.audit.snapshots import SnapshotCheck
from minruntime.audit.verify import TableCheck
from minruntime.commands.common import AT_HELP, Json, current_settings, engine, option, parse_at
from minruntime.commands.render import console, print_json
from minruntime.errors import UserError
from minruntime.topic_admin import input_topic_roles

_err = console(stderr=True)
_out = console()


class ReplayDiffersError(UserError):
    """--verify found a difference between the replayed and the live state."""

    exit_code = 1


def replay_command(
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Compare the rebuilt projections with the live ones (checksums per table, "
            "differing rows); exit 1 on any difference.",
        ),
    ] = False,
    until: Annotated[
        str | None,
        option(
            "--until",
            help="Stop at the state the service had at this instant. " + AT_HELP,
        ),
    ] = None,
    into: Annotated[
        str | None,
        option(
            "--into",
            help="Keep the result as shadow schemas INTO (read surface) and INTO_state "
            "(tables), to query with SQL. Default: a temporary shadow, dropped at the end.",
        ),
    ] = None,
    from_kafka: Annotated[
        bool,
        typer.Option(
            "--from-kafka",
            help="Read the topics from their earliest offsets instead of the event_log table.",
        ),
    ] = False,
    drop: Annotated[
        str | None,
        option("--drop", help="Drop the shadow DROP made by --into, and exit."),
    ] = None,
    jobs: Annotated[
        int | None,
        option(
            "--jobs",
            min=1,
            max=64,
            help="Replay in JOBS processes, each a share of the podgroups (the first also the "
            "queue tree, configs and nodes). Default: this machine's cores (at most 8), 1 for "
            "a log under 20,000 entries. Not with --into or --from-kafka.",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Rebuild every projection from the event log into a separate schema; --verify it."""
    if drop is not None:
        dropped = drop_kept(engine(), drop)
        print(f"dropped shadow {drop}" if dropped else f"no shadow named {drop}")
        return
    settings = current_settings()
    request = Rebuild(
        verify=verify,
        until=parse_at(until, option="--until"),
        into=into,
        from_kafka=from_kafka,
        jobs=jobs,
        input_topics=input_topic_roles(settings) if from_kafka else None,
    )
    display = functools.partial(_ProgressBar, quiet=as_json)
    _finish(rebuild(engine(), settings, request, display), verify=verify, as_json=as_json)


def _finish(rebuilt: Rebuilt, *, verify: bool, as_json: bool) -> None:
    """Print what the replay did and found; exit 1 (ReplayDiffersError) on a difference."""
    result, schema = rebuilt.result, rebuilt.schema
    report, checks, snapshot_checks = result.report, result.checks, result.snapshots
    summary = describe(report)
    summary["schema"] = schema
    summary["source"] = rebuilt.source
    summary["parts"] = rebuilt.parts
    if verify:
        summary["verify"] = [_check_json(check) for check in checks]
        summary["snapshots"] = [_snapshot_json(result) for result in snapshot_checks]
    if as_json:
        print_json(summary)
    else:
        _print_report(report, schema, checks if verify else None, rebuilt.parts)
        _print_snapshot_checks(snapshot_checks)
    problems = [check for check in checks if not check.equal]
    if report.rejected and verify:
        raise ReplayDiffersError(f"replay rejected events: {report.rejected[0]}")
    if problems:
        names = ", ".join(check.table for check in problems)
        raise ReplayDiffersError(f"replayed state differs from the live state in: {names}")
    wrong = [result for result in snapshot_checks if not result.equal]
    if wrong:
        ids = ", ".join(f"#{result.snapshot.id}" for result in wrong)
        raise ReplayDiffersError(f"projection snapshots differ from the replayed log: {ids}")


class _ProgressBar:
    """A progress bar on stderr (events done / total, events per second)."""

    def __init__(self, total: int, *, quiet: bool) -> None:
        self._bar = Progress(
            TextColumn("replay"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} events/s"),
            TimeElapsedColumn(),
            console=_err,
            disable=quiet,
            transient=False,
        )
        self._task = self._bar.add_task("replay", total=max(total, 1), rate="-")

    def __enter__(self) -> Advance:
        self._bar.start()
        return self._advance

    def __exit__(self, *_: object) -> None:
        self._bar.stop()

    def _advance(self, done: int) -> None:
        task = self._bar.tasks[0]
        elapsed = task.elapsed or 0.0
        rate = f"{done / elapsed:,.0f}" if elapsed > 0 else "-"
        self._bar.update(self._task, completed=done, rate=rate)


def _print_report(
    report: ReplayReport, into: str | None, checks: list[TableCheck] | None, parts: int
) -> None:
    _out.print(
        f"replayed {report.events} events and {report.decisions} requeue decisions "
        f"in {report.seconds:.2f} s ({report.rate:,.0f} events/s"
        + (f", {parts} processes" if parts > 1 else "")
        + ")"
        + (f"; {report.ignored} logged events have nothing to project" if report.ignored else "")
        + (
            f"; {report.dead_lettered} invalid records dead-lettered"
            if report.dead_lettered
            else ""
        )
    )
    for problem in report.rejected:
        _out.print(f"[red]not applied on replay:[/] {problem}")
    if report.rejected_count > len(report.rejected):
        _out.print(f"[red]and {report.rejected_count - len(report.rejected)} more not applied[/]")
    if into is not None:
        _out.print(
            f"kept as schema {into} (views and functions) and {into}_state (tables): "
            f"SELECT * FROM {into}.preempt_protection(now());  drop with "
            f"`minruntime replay --drop {into}`"
        )
    if checks is None:
        return
    table = Table("table", "live rows", "replayed rows", "checksum", "verdict")
    for check in checks:
        table.add_row(
            check.table,
            str(check.live_rows),
            str(check.replay_rows),
            check.live_checksum[:12] + ("" if check.equal else f" ≠ {check.replay_checksum[:12]}"),
            "[green]equal[/]" if check.equal else f"[red]{check.differing_keys} rows differ[/]",
        )
    _out.print(table)
    for check in checks:
        _print_differences(check, "live")
        hidden = check.differing_keys - len(check.differences)
        if hidden > 0:
            _out.print(f"  … and {hidden} more in {check.table}")
    if all(check.equal for check in checks):
        _out.print("[green]verify: the live state is exactly what the event log implies[/]")


def _check_json(check: TableCheck) -> dict[str, object]:
    return {
        "table": check.table,
        "equal": check.equal,
        "live_rows": check.live_rows,
        "replayed_rows": check.replay_rows,
        "live_checksum": check.live_checksum,
        "replayed_checksum": check.replay_checksum,
        "differing_keys": check.differing_keys,
        "differences": [
            {"key": d.key, "live": d.live, "replayed": d.replay} for d in check.differences
        ],
    }


def _print_snapshot_checks(results: list[SnapshotCheck]) -> None:
    for result in results:
        snapshot = result.snapshot
        where = (
            f"snapshot #{snapshot.id} at seq {snapshot.log_seq} ({snapshot.events:,} entries, "
            f"taken {snapshot.taken_at:%Y-%m-%dT%H:%M:%SZ})"
        )
        if result.equal:
            _out.print(f"[green]{where}: equal to the replay up to its position[/]", soft_wrap=True)
            continue
        differing = ", ".join(
            f"{check.table} ({check.differing_keys} rows)"
            for check in result.tables
            if not check.equal
        )
        _out.print(
            f"[red]{where}: {result.problem or 'differs in ' + differing}[/]", soft_wrap=True
        )
        for check in result.tables:
            _print_differences(check, "snapshot")


def _print_differences(check: TableCheck, compared: str) -> None:
    """The differing rows ``check`` shows: ``compared``'s (the live state, a snapshot), then the
    replay's."""
    for difference in check.differences:
        _out.print(f"[bold]{check.table}[/] {difference.key}")
        for side, value in ((compared, difference.live), ("replayed", difference.replay)):
            _out.print(f"  {side + ':':<10}{value or '(absent)'}", markup=False, soft_wrap=True)


def _snapshot_json(result: SnapshotCheck) -> dict[str, object]:
    snapshot = result.snapshot
    return {
        "id": snapshot.id,
        "log_seq": snapshot.log_seq,
        "events": snapshot.events,
        "taken_at": snapshot.taken_at,
        "equal": result.equal,
        "problem": result.problem,
        "tables": [_check_json(check) for check in result.tables],
    }
