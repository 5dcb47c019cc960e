"""How long `minruntime --help` takes: the median of RUNS runs, each a fresh process.

    python benchmarks/bench_cli_help.py [--runs 20] [--tree SERVICES_DIR ...] [-- ARGS...]

With one or more source trees (`--tree`: their `services/` directories, e.g. a `git archive`
of an older commit), the runs of each alternate, so a machine busy with other work slows every
tree alike. Without one, the installed package is measured. ARGS default to `--help`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tree", action="append", default=[], help="a services/ directory")
    parser.add_argument("args", nargs="*", help="the command line to time (after --)")
    options = parser.parse_args()
    argv = [arg for arg in options.args if arg != "--"] or ["--help"]
    code = f"import sys; from minruntime.cli import main; sys.exit(main({argv!r}))"
    trees = options.tree or [""]
    times: dict[str, list[float]] = {tree: [] for tree in trees}
    for _ in range(options.runs):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": tree} if tree else dict(os.environ)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
            times[tree].append(time.perf_counter() - started)
    for tree, measured in times.items():
        print(
            f"{tree or 'installed'}: minruntime {' '.join(argv)}: median "
            f"{statistics.median(measured) * 1000:.0f} ms over {options.runs} runs "
            f"(min {min(measured) * 1000:.0f}, max {max(measured) * 1000:.0f})"
        )


if __name__ == "__main__":
    main()
