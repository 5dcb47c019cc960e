"""Benchmark one requeue cycle end to end against PostgreSQL: read, nominate, plan, lock, record.

Builds the contended cluster of ``bench_requeue_plan.py`` (nodes of 8 GPUs in 4 node pools,
each packed to ~97 % by running podgroups; pending podgroups of typical and odd gang shapes)
in a queue tree from ``cluster.build_tree`` (5,000 queues, with minimum runtimes from
``cluster.duration``) and feeds it through ``apply_batch`` exactly as the processor would,
into a scratch database migrated to head. The running podgroups are annotated so that the
cycle sees exactly ``--candidates`` candidates, a realistic mix:

- 85 % over-running with ``kai.scheduler/expected-runtime`` (the built-in nominator only),
- 10 % the same and also nominated by ``proportion`` (``requeue.nominated``),
- 2 % nominated by ``proportion`` only (no expected runtime),
- 1.5 % over-running, in cooldown (``requeue-not-before`` ahead) and nominated by
  ``proportion``: the nominator skips them, the worker records ``skipped/cooldown``,
- 0.5 % not preemptible, nominated by ``proportion``: ``skipped/not_preemptible``,
- 1 % pending podgroups nominated by ``proportion``: ``skipped/not_running``;

the other running podgroups either have no expected runtime or are not over it yet (a few
are over it but in cooldown, never nominated). That database is the template: it is seeded
once, ``VACUUM ANALYZE``d, and every repetition runs on a fresh ``CREATE DATABASE ...
TEMPLATE`` copy, so each measured cycle starts from the same state (no decisions recorded
yet) and has to write every decision. On the copy, one connection first reads the cycle's
inputs once in a transaction it rolls back (what a running worker's previous cycle leaves
behind: warm catalog and buffer caches; ``--cold`` skips it), then the measured cycle runs
as the worker runs it: ``run_cycle`` in a REPEATABLE READ transaction, then COMMIT.

With ``--disruption on``, every node pool also sets a disruption budget and an eviction gap
(``maxEvictionsPerWindow`` 100,000 per ``evictionWindow`` 1h, ``minEvictionGap`` 1s: evaluated
for every candidate, never binding, so the decisions stay comparable) and every running
podgroup carries a top owner (``kai.scheduler/top-owner-metadata``, one JobSet each) and a
``minruntime.kai.scheduler/checkpointed-at`` somewhere in its run, so the planner's checkpoint
preference orders the candidates by their work at risk. ``--disruption both`` seeds both
states from the same random cluster and times their cycles alternately, side by side.

    .venv/bin/python benchmarks/bench_requeue_cycle.py [--nodes 2000] [--candidates 1000]
        [--pending 5000] [--queues 5000] [--runs 5] [--cold] [--profile] [--keep]
        [--disruption off|on|both]

Needs the local stack (``minruntime stack up``). Prints figures, asserts no timings.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import random
import statistics
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import psycopg
import sqlalchemy as sa
from psycopg import sql

from bench_requeue_plan import NOW, build_snapshot, cluster_arguments, outcome_counts
from benchkit import RecordBatches, print_profile, scratch_database
from cluster import build_tree, queue_upserts
from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    ClusterState,
    RunningPodGroup,
    format_rfc3339,
)
from minruntime.core.checkpoint import CHECKPOINTED_AT_ANNOTATION
from minruntime.core.disruption import TOP_OWNER_ANNOTATION
from minruntime.ingest import InboundRecord, apply_batch
from minruntime.requeue import CycleReport, run_cycle
from minruntime.requeue.cycle_inputs import load_cycle_inputs
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime_dev.scratch import (
    admin_connection,
)
from minruntime_dev.scratch import drop_scratch_database as drop_database

SEED: Final = 20261121
TARGET_SECONDS: Final = 2.0
TOPIC: Final = "kai.requeue-decisions"
BATCH: Final = 2000
PROPORTION: Final = "proportion"
NEXT_CYCLE: Final = timedelta(seconds=10)


def minutes(delta: timedelta) -> int:
    return int(delta.total_seconds() // 60)


class Scenario:
    """Which running podgroups are candidates, and how; what the cycle should see."""

    def __init__(self, rng: random.Random, snapshot: ClusterState, candidates: int) -> None:
        counts = {
            "cooldown": candidates * 15 // 1000,
            "not_preemptible": candidates // 200,
            "not_running": candidates // 100,
            "external_only": candidates // 50,
            "both": candidates // 10,
        }
        counts["expected_only"] = candidates - sum(counts.values())
        running = [pg.uid for pg in snapshot.running]
        pending = [pg.uid for pg in snapshot.pending]
        needed = candidates - counts["not_running"]
        if needed > len(running) or counts["not_running"] > len(pending):
            raise SystemExit(
                f"{candidates} candidates need {needed} running podgroups "
                f"(the cluster has {len(running)}): more nodes or fewer candidates"
            )
        chosen = rng.sample(running, needed)
        self.role: dict[str, str] = {}
        position = 0
        for role in ("expected_only", "both", "external_only", "cooldown", "not_preemptible"):
            for uid in chosen[position : position + counts[role]]:
                self.role[uid] = role
            position += counts[role]
        rest = [uid for uid in running if uid not in self.role]
        # A few over-running podgroups in cooldown that nobody else nominates: the
        # nominator skips them (counted in its skip metric), they are not candidates.
        for uid in rng.sample(rest, min(len(rest), candidates // 50)):
            self.role[uid] = "cooling"
        self.nominated_pending = rng.sample(pending, counts["not_running"])
        self.counts = counts

    def annotations(
        self, rng: random.Random, podgroup: RunningPodGroup, disruption: bool = False
    ) -> dict[str, str]:
        role = self.role.get(podgroup.uid)
        assert podgroup.start_time is not None  # build_snapshot starts every run
        ran = minutes(NOW - podgroup.start_time)
        # Not drawn from ``rng``: both states of ``--disruption both`` are the same cluster.
        extra = disruption_annotations(podgroup) if disruption else {}
        if role in (None, "external_only"):
            # Half without an expected runtime, half not over it yet.
            if rng.random() < 0.5:
                return extra
            return {EXPECTED_RUNTIME_ANNOTATION: f"{ran + rng.randint(5, 240)}m", **extra}
        return {EXPECTED_RUNTIME_ANNOTATION: f"{rng.randint(max(1, ran // 4), ran)}m", **extra}

    def external(self, uid: str) -> bool:
        return self.role.get(uid) in ("both", "external_only", "cooldown", "not_preemptible")


def disruption_annotations(podgroup: RunningPodGroup) -> dict[str, str]:
    """A top owner of its own and a checkpoint at a point of its run fixed by its uid."""
    assert podgroup.start_time is not None
    fraction = zlib.crc32(podgroup.uid.encode()) / 2**32
    saved = podgroup.start_time + (NOW - podgroup.start_time) * fraction
    owner = {"kind": "JobSet", "name": podgroup.uid, "uid": f"owner-{podgroup.uid}"}
    return {
        TOP_OWNER_ANNOTATION: json.dumps(owner),
        CHECKPOINTED_AT_ANNOTATION: format_rfc3339(saved),
    }


# The budget and the gap of ``--disruption on``: checked for every candidate, never binding.
DISRUPTION_CONFIG: Final = {
    "maxEvictionsPerWindow": 100_000,
    "evictionWindow": "1h",
    "minEvictionGap": "1s",
}


def records(
    rng: random.Random,
    args: argparse.Namespace,
    tree: list[tuple[str, str | None, int]],
    snapshot: ClusterState,
    scenario: Scenario,
    disruption: bool = False,
) -> Iterator[list[InboundRecord]]:
    """Batches of input records: queues, configs, nodes, podgroups, annotations, nominations."""
    batches = RecordBatches(BATCH)
    emit = batches.emit
    seeded = NOW - timedelta(days=1)
    full: list[list[InboundRecord] | None] = []
    for name, data in queue_upserts(rng, tree):
        full.append(emit("kai.queues", name, "queue.upserted", data, seeded))
    for index in range(args.pools):
        pool = f"pool-{index}"
        data = {
            "nodePool": pool,
            "defaultPreemptMinRuntime": "0s",
            "defaultReclaimMinRuntime": rng.choice(["0s", "5m", "30m"]),
            "reclaimResolveMethod": "lca" if index % 2 == 0 else "queue",
        }
        if disruption:
            data.update(DISRUPTION_CONFIG)
        full.append(emit("kai.queues", f"config/{pool}", "config.updated", data, seeded))
    for node in snapshot.nodes:
        data = {"name": node.name, "nodePool": node.node_pool, "gpu": node.gpu}
        full.append(emit("kai.nodes", node.name, "node.upserted", data, seeded))
    for podgroup in snapshot.running:
        uid = podgroup.uid
        role = scenario.role.get(uid)
        submitted = {
            "uid": uid,
            "name": uid,
            "namespace": "bench",
            "queue": podgroup.queue,
            "nodePool": podgroup.node_pool,
            "priority": podgroup.priority,
            "preemptible": role != "not_preemptible",
            "subGroups": [{"name": "default", "minAvailable": podgroup.subgroups[0].min_available}],
            "pods": [{"name": f"{uid}-{i}", "gpu": pod.gpu} for i, pod in enumerate(podgroup.pods)],
            "annotations": scenario.annotations(rng, podgroup, disruption),
        }
        start = podgroup.start_time
        assert start is not None
        queued = start - timedelta(seconds=rng.randint(1, 600))
        full.append(emit("kai.podgroups", uid, "podgroup.submitted", submitted, queued))
        allocated = {
            "uid": uid,
            "pods": [
                {"name": f"{uid}-{i}", "node": pod.node} for i, pod in enumerate(podgroup.pods)
            ],
        }
        full.append(emit("kai.podgroups", uid, "podgroup.allocated", allocated, start))
        if role in ("cooldown", "cooling"):
            # The cluster carries the annotation the worker wrote at an earlier requeue.
            not_before = format_rfc3339(NOW + timedelta(seconds=rng.randint(30, 300)))
            annotated = {"uid": uid, "annotations": {REQUEUE_NOT_BEFORE_ANNOTATION: not_before}}
            full.append(emit("kai.podgroups", uid, "podgroup.annotated", annotated, start))
    for contender in snapshot.pending:
        uid = contender.uid
        submitted = {
            "uid": uid,
            "name": uid,
            "namespace": "bench",
            "queue": contender.queue,
            "nodePool": contender.node_pool,
            "priority": contender.priority,
            "subGroups": [
                {"name": "default", "minAvailable": contender.subgroups[0].min_available}
            ],
            "pods": [
                {"name": f"{uid}-{i}", "gpu": pod.gpu} for i, pod in enumerate(contender.pods)
            ],
        }
        assert contender.submitted_at is not None
        when = contender.submitted_at
        full.append(emit("kai.podgroups", uid, "podgroup.submitted", submitted, when))
    nominated = [pg.uid for pg in snapshot.running if scenario.external(pg.uid)]
    for uid in [*nominated, *scenario.nominated_pending]:
        data = {"uid": uid, "nominatedBy": PROPORTION, "reason": "overquota"}
        when = NOW - timedelta(seconds=rng.randint(1, 60))
        full.append(emit("kai.nominations", uid, "requeue.nominated", data, when))
    yield from (ready for ready in full if ready is not None)
    yield from batches.rest()


def seed(url: str, args: argparse.Namespace, disruption: bool = False) -> None:
    """Build the cluster, feed it through apply_batch, VACUUM ANALYZE (``disruption``: with
    budgets, gaps, owners and checkpoints)."""
    rng = random.Random(SEED)
    # The planner benchmark's cluster, in leaf-ish queues (depth >= 3) of the big tree.
    tree = build_tree(rng, args.queues)
    teams = [name for name, _, depth in tree if depth >= 3] or [name for name, _, _ in tree]
    started = time.perf_counter()
    snapshot = build_snapshot(rng, args.nodes, args.pools, args.pending, teams, args.odd_shapes)
    scenario = Scenario(rng, snapshot, args.candidates)
    engine = engine_from(url)
    applied = dead = 0
    try:
        for batch in records(rng, args, tree, snapshot, scenario, disruption):
            with engine.begin() as conn:
                outcome = apply_batch(conn, batch, consumer_group="bench")
            applied += outcome.applied
            dead += outcome.dead_lettered
    finally:
        engine.dispose()
    if dead:
        raise SystemExit(f"{dead} seed events were dead-lettered: the generator is wrong")
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        counts = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'running'),"
            " count(*) FILTER (WHERE status = 'pending')"
            " FROM minruntime_state.podgroup_state"
        ).fetchone()
        pods = conn.execute("SELECT count(*) FROM minruntime_state.pod_state").fetchone()
    seconds = time.perf_counter() - started
    assert counts is not None
    assert pods is not None
    print(
        f"seeded {'with' if disruption else 'without'} disruption rules: "
        f"{applied:,} events through apply_batch (batches of {BATCH}) in {seconds:.1f} s: "
        f"{args.queues:,} queues, {len(snapshot.nodes):,} nodes in {args.pools} pools, "
        f"{counts[0]:,} running and {counts[1]:,} pending podgroups ({pods[0]:,} pods)"
    )
    print("candidate mix: " + ", ".join(f"{k} {v}" for k, v in scenario.counts.items()))


def copy_url(template_url: str, suffix: str) -> str:
    """The URL of the copy ``<template>_<suffix>`` (a scratch name: same prefix)."""
    parts = urlsplit(template_url)
    return urlunsplit(parts._replace(path=f"{parts.path}_{suffix}"))


def copy_database(settings: Settings, template_url: str, url: str) -> None:
    """CREATE DATABASE <url's database> TEMPLATE <template's database>."""
    template = urlsplit(template_url).path.lstrip("/")
    name = urlsplit(url).path.lstrip("/")
    statement = sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
        sql.Identifier(name),
        sql.Identifier(template),
        sql.Identifier(urlsplit(template_url).username or settings.database_parts.user),
    )
    for attempt in range(10):
        try:
            with admin_connection(settings) as conn:
                conn.execute(statement)
            return
        except psycopg.errors.ObjectInUse:
            # An autovacuum worker may still be connected to the template: try again.
            if attempt == 9:
                raise
            time.sleep(1)


_WRITTEN: Final = sa.text(
    "SELECT (SELECT count(*) FROM minruntime_state.requeue_decision_log),"
    " (SELECT count(*) FROM minruntime_state.event_log WHERE partition IS NULL),"
    " (SELECT count(*) FROM minruntime_state.outbox),"
    " (SELECT count(*) FROM minruntime_state.requeue_promises),"
    " (SELECT count(*) FROM minruntime_state.podgroup_state WHERE awaiting_release)"
)


def measure(
    url: str, cold: bool, profile: cProfile.Profile | None
) -> tuple[dict[str, float], CycleReport, tuple[int, ...]]:
    """One cycle on a fresh copy: its timings (with commit and total), report, rows written."""
    engine = engine_from(url)
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            if not cold:
                with conn.begin() as warm:
                    load_cycle_inputs(conn, NOW)
                    warm.rollback()
            if profile is not None:
                profile.enable()
            started = time.perf_counter()
            transaction = conn.begin()
            report = run_cycle(conn, now=NOW, topic=TOPIC)
            ran = time.perf_counter()
            transaction.commit()
            committed = time.perf_counter()
            if profile is not None:
                profile.disable()
            with conn.begin():
                written = tuple(conn.execute(_WRITTEN).one())
            # The worker's next cycle, 10 s later on the same state: most outcomes repeat
            # and are not recorded again (not part of the figure the issue asks for).
            started_next = time.perf_counter()
            with conn.begin():
                following = run_cycle(conn, now=NOW + NEXT_CYCLE, topic=TOPIC)
            next_total = time.perf_counter() - started_next
    finally:
        engine.dispose()
    timings = dict(report.timings)
    timings["cycle"] = ran - started
    timings["commit"] = committed - ran
    timings["total"] = committed - started
    timings["next"] = next_total
    timings["next_recorded"] = len(following.recorded)
    return timings, report, written


def main() -> None:
    parser = cluster_arguments(__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=5000)
    parser.add_argument("--cold", action="store_true", help="no warm-up read before the cycle")
    parser.add_argument("--profile", action="store_true", help="cProfile the cycles (slower)")
    parser.add_argument("--keep", action="store_true", help="keep the template database")
    parser.add_argument(
        "--disruption",
        choices=("off", "on", "both"),
        default="off",
        help="budgets, gaps and checkpoint preference: off, on, or both side by side",
    )
    args = parser.parse_args()
    settings = Settings()
    if args.disruption != "both":
        name = "minruntime_test_bench_cycle"
        with scratch_database(settings, name, keep=args.keep) as template:
            seed(template, args, args.disruption == "on")
            measure_copies(settings, template, args)
        return
    with (
        scratch_database(settings, "minruntime_test_bench_cycle", keep=args.keep) as off,
        scratch_database(settings, "minruntime_test_bench_cycle_on", keep=args.keep) as on,
    ):
        seed(off, args)
        seed(on, args, disruption=True)
        side_by_side(settings, off, on, args)


def side_by_side(settings: Settings, off: str, on: str, args: argparse.Namespace) -> None:
    """Time ``--runs`` cycles of each state, alternately (off, on, off, on, ...), each on a
    fresh copy, and print the ratio of the medians."""
    totals: dict[str, list[float]] = {"off": [], "on": []}
    plans: dict[str, list[float]] = {"off": [], "on": []}
    decided: dict[str, Counter[str]] = {}
    copies: list[str] = []
    try:
        for run in range(args.runs):
            for label, template in (("off", off), ("on", on)):
                url = copy_url(template, f"r{run}")
                copies.append(url)
                copy_database(settings, template, url)
                timings, report, _ = measure(url, args.cold, None)
                drop_database(settings, url)
                copies.remove(url)
                totals[label].append(timings["total"])
                plans[label].append(timings["plan"])
                decided[label] = outcome_counts(report.plan)
                print(
                    f"run {run + 1} {label:>3}: {timings['total']:.3f} s (load "
                    f"{timings['load']:.3f}, plan {timings['plan']:.3f}, write "
                    f"{timings['write']:.3f}, commit {timings['commit']:.3f})"
                )
    finally:
        for url in copies:
            drop_database(settings, url)
    print()
    print(f"python {platform.python_version()} on {platform.machine()}")
    for label in ("off", "on"):
        print(
            f"decisions {label}: "
            + ", ".join(f"{k} {v}" for k, v in sorted(decided[label].items()))
        )
    off_total, on_total = statistics.median(totals["off"]), statistics.median(totals["on"])
    off_plan, on_plan = statistics.median(plans["off"]), statistics.median(plans["on"])
    print(
        f"cycle (run_cycle + COMMIT), median of {args.runs}: off {off_total:.3f} s, "
        f"on {on_total:.3f} s, on/off {on_total / off_total:.3f}"
    )
    print(
        f"plan step alone, median: off {off_plan:.3f} s, on {on_plan:.3f} s, "
        f"on/off {on_plan / off_plan:.3f}"
    )
    print(f"target: on within 10 % of off ({'met' if on_total <= 1.1 * off_total else 'missed'})")


def measure_copies(settings: Settings, template: str, args: argparse.Namespace) -> None:
    """Time ``--runs`` cycles on the seeded ``template``, each on a fresh copy of it."""
    copies: list[str] = []
    try:
        profile = cProfile.Profile() if args.profile else None
        results: list[dict[str, float]] = []
        reports: list[tuple[CycleReport, tuple[int, ...]]] = []
        for run in range(args.runs):
            started = time.perf_counter()
            url = copy_url(template, f"r{run}")
            copies.append(url)  # dropped in `finally` even if the copy fails half-way
            copy_database(settings, template, url)
            copied = time.perf_counter() - started
            timings, report, written = measure(url, args.cold, profile)
            drop_database(settings, url)
            copies.remove(url)
            results.append(timings)
            reports.append((report, written))
            print(
                f"run {run + 1}: {timings['total']:.3f} s (load {timings['load']:.3f}, "
                f"plan {timings['plan']:.3f}, write {timings['write']:.3f}, "
                f"commit {timings['commit']:.3f}); copy of the template took {copied:.1f} s"
            )
        report, written = reports[0]
        outcomes = [outcome_counts(r.plan) for r, _ in reports]
        if any(o != outcomes[0] for o in outcomes) or any(w != written for _, w in reports):
            print("WARNING: the runs did not decide the same (they should: same state, same now)")
        total = [t["total"] for t in results]
        median = statistics.median(total)
        decisions = len(report.plan.decisions)
        skips = Counter(str(reason) for reason in report.nominations.skipped.values())
        print()
        print(f"python {platform.python_version()} on {platform.machine()}")
        print(
            f"cycle: {len(report.candidates):,} candidates "
            f"({len(report.nominations.nominated):,} nominated by expectedruntime, "
            f"nominator skips {dict(skips)}), "
            f"{decisions:,} decisions, {len(report.recorded):,} recorded"
        )
        for label, count in sorted(outcomes[0].items()):
            print(f"  {label}: {count}")
        beneficiaries = sum(len(d.beneficiaries) for d in report.committed)
        print(f"  beneficiaries: {beneficiaries}")
        print(
            "written per cycle: decision log {}, event log {}, outbox {}, promises {}, "
            "podgroups awaiting release {}".format(*written)
        )
        print(
            f"wall time per cycle ({'cold' if args.cold else 'warm'} connection, "
            f"run_cycle + COMMIT, {args.runs} runs): median {median:.3f} s, "
            f"min {min(total):.3f} s, max {max(total):.3f} s"
        )
        print(
            f"decisions/s: {decisions / median:,.0f} (median), {decisions / min(total):,.0f} (best)"
        )
        for step in ("load", "plan", "write", "commit"):
            values = [t[step] for t in results]
            print(
                f"  {step:>6}: median {statistics.median(values):.3f} s "
                f"({statistics.median(values) / median:.0%}), min {min(values):.3f} s"
            )
        following = [t["next"] for t in results]
        print(
            f"next cycle 10 s later on the same copy (repeats not recorded again, "
            f"{results[0]['next_recorded']:.0f} recorded): median "
            f"{statistics.median(following):.3f} s, min {min(following):.3f} s"
        )
        print(
            f"target <= {TARGET_SECONDS:.0f} s per cycle: ratio {median / TARGET_SECONDS:.2f}x "
            f"({'met' if median <= TARGET_SECONDS else 'missed'})"
        )
        if profile is not None:
            print_profile(profile, 45, 30)
    finally:
        for url in copies:
            drop_database(settings, url)


if __name__ == "__main__":
    main()
