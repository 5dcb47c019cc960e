"""Benchmark the minimum-runtime resolver: cold (fresh caches) versus warm resolutions.

Builds a deterministic (seeded) queue forest of a fixed depth, draws random (reclaimer,
victim) pairs, and times resolving all of them with a fresh Resolver (cold: includes building
its per-queue caches) and again on the same Resolver (warm).

    .venv/bin/python benchmarks/bench_resolver.py [--queues 5000] [--pairs 1000000]
"""

from __future__ import annotations

import platform
import random
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial

from benchkit import sized_arguments
from minruntime.core import MinRuntimeConfig, Queue, QueueTree, Resolution, Resolver

DEPTH = 6


def build_tree(queue_count: int, rng: random.Random) -> QueueTree:
    """A forest of exactly ``DEPTH`` levels whose level sizes grow threefold."""
    weights = [3**level for level in range(DEPTH)]
    sizes = [max(1, queue_count * weight // sum(weights)) for weight in weights]
    sizes[-1] = max(1, queue_count - sum(sizes[:-1]))
    queues: list[Queue] = []
    previous: list[str] = []
    for level, size in enumerate(sizes):
        current = [f"l{level}-q{index}" for index in range(size)]
        for name in current:
            queues.append(
                Queue(
                    name=name,
                    parent=rng.choice(previous) if previous else None,
                    preempt_min_runtime=maybe_runtime(rng, 0.3),
                    reclaim_min_runtime=maybe_runtime(rng, 0.4),
                )
            )
        previous = current
    return QueueTree(queues)


def maybe_runtime(rng: random.Random, probability: float) -> timedelta | None:
    if rng.random() >= probability:
        return None
    return timedelta(seconds=rng.choice([0, 60, 300, 600, 1800, 3600]))


def timed(resolve: Callable[[], object]) -> float:
    started = time.perf_counter()
    resolve()
    return time.perf_counter() - started


def run_reclaim(resolver: Resolver, pairs: list[tuple[str, str]]) -> None:
    reclaim = resolver.reclaim_min_runtime
    for reclaimer, victim in pairs:
        reclaim(reclaimer, victim)


def run_preempt(resolver: Resolver, victims: list[str]) -> None:
    preempt = resolver.preempt_min_runtime
    for victim in victims:
        preempt(victim)


def naive_reclaim_lca(tree: QueueTree, reclaimer: str, victim: str) -> timedelta:
    """No caches: recompute the LCA and walk up on every call (the baseline)."""
    victim_path, reclaimer_path = tree.path(victim), tree.path(reclaimer)
    if victim_path[0] != reclaimer_path[0]:
        start = 0
    else:
        common = 0
        while (
            common < min(len(victim_path), len(reclaimer_path))
            and victim_path[common] == reclaimer_path[common]
        ):
            common += 1
        start = min(common, len(victim_path) - 1)
    for name in reversed(victim_path[: start + 1]):
        queue = tree.get(name)
        if queue is not None and queue.reclaim_min_runtime is not None:
            return queue.reclaim_min_runtime
    return timedelta(0)


def run_naive(tree: QueueTree, pairs: list[tuple[str, str]]) -> None:
    for reclaimer, victim in pairs:
        naive_reclaim_lca(tree, reclaimer, victim)


def checksum(results: list[Resolution]) -> int:
    return sum(result.min_runtime // timedelta(seconds=1) for result in results)


def main() -> None:
    description = __doc__.splitlines()[0] if __doc__ else None
    parser = sized_arguments(description, queues=5_000, pairs=1_000_000, seed=20261121)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    build_started = time.perf_counter()
    tree = build_tree(args.queues, rng)
    build_seconds = time.perf_counter() - build_started
    names = [queue.name for queue in tree]
    pairs = [(rng.choice(names), rng.choice(names)) for _ in range(args.pairs)]
    victims = [victim for _, victim in pairs]
    depth = max(len(path) for path in tree.paths().values())
    print(
        f"python {platform.python_version()}  queues={len(tree)} depth={depth} "
        f"roots={len(tree.roots())} pairs={len(pairs)} seed={args.seed} "
        f"tree_build={build_seconds * 1000:.1f}ms"
    )

    cases: list[tuple[str, MinRuntimeConfig, Callable[[Resolver], None]]] = [
        ("reclaim lca", MinRuntimeConfig(), lambda r: run_reclaim(r, pairs)),
        (
            "reclaim queue",
            MinRuntimeConfig(reclaim_resolve_method="queue"),
            lambda r: run_reclaim(r, pairs),
        ),
        ("preempt", MinRuntimeConfig(), lambda r: run_preempt(r, victims)),
    ]
    # warm/cold is the ratio of throughputs: how much faster the second pass is.
    print(f"{'case':<14} {'cold res/s':>12} {'warm res/s':>12} {'warm/cold':>10}")
    for label, config, run in cases:
        resolver = Resolver(tree, config)
        cold = timed(partial(run, resolver))
        warm = timed(partial(run, resolver))
        print(
            f"{label:<14} {len(pairs) / cold:>12,.0f} {len(pairs) / warm:>12,.0f} "
            f"{cold / warm:>9.2f}x"
        )

    baseline = pairs[: min(len(pairs), 200_000)]
    naive = timed(partial(run_naive, tree, baseline))
    print(f"{'naive lca':<14} {len(baseline) / naive:>12,.0f} {'(no cache)':>12}")

    # The answers must not depend on the cache: a cold and a warm pass agree.
    sample = pairs[: min(len(pairs), 10_000)]
    fresh = Resolver(tree, MinRuntimeConfig())
    first = [fresh.reclaim_min_runtime(r, v) for r, v in sample]
    second = [fresh.reclaim_min_runtime(r, v) for r, v in sample]
    assert first == second, "warm answers differ from cold answers"
    naive_answers = [naive_reclaim_lca(tree, r, v) for r, v in sample]
    assert [result.min_runtime for result in first] == naive_answers, "cache != baseline"
    print(
        f"check: {len(sample)} lca answers identical cold, warm and naive (sum {checksum(first)}s)"
    )


if __name__ == "__main__":
    main()
