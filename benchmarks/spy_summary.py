"""Summarise py-spy's collapsed stacks (``--format raw``): where the sampled time went.

    .venv/bin/python benchmarks/spy_summary.py FILE [--top 40] [--match TEXT]

Prints, per function (``name (file)``), the share of samples in which it is on the stack
(inclusive) and at the top (self), and the share of samples per thread.
"""

from __future__ import annotations

import argparse
import collections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--match", default="", help="only stacks containing this text")
    args = parser.parse_args()
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    with open(args.file) as lines:
        for line in lines:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if args.match not in stack:
                continue
            count = int(count_text)
            total += count
            frames = stack.split(";")
            threads[frames[0]] += count
            names = [frame.split(":")[0] for frame in frames[1:]]
            for name in set(names):
                inclusive[name] += count
            if names:
                own[names[-1]] += count
    print(f"{total} samples")
    print("threads:")
    for name, count in threads.most_common(8):
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("inclusive (on the stack):")
    for name, count in inclusive.most_common(args.top):
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("self (top of the stack):")
    for name, count in own.most_common(args.top):
        print(f"  {100 * count / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
