"""Draw py-spy's collapsed stacks (``--format raw``) as a flame graph SVG (docs/profiles/).

    .venv/bin/python benchmarks/flame_svg.py STACKS.txt OUT.svg [--title TEXT] [--match TEXT]

One file, two readings: ``spy_summary.py`` sums the same stacks per function, this draws
them (each box: a frame, its width: the samples with it on the stack; hover for its name and
share). No dependency: plain SVG, no script.
"""

from __future__ import annotations

import argparse
import html
from dataclasses import dataclass, field

WIDTH = 1600.0
ROW = 16.0
MIN_WIDTH = 0.5  # boxes narrower than this (pixels) are left out


@dataclass
class Node:
    samples: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def read(path: str, match: str) -> Node:
    root = Node()
    with open(path) as lines:
        for line in lines:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or match not in stack:
                continue
            count = int(count_text)
            node = root
            node.samples += count
            for frame in stack.split(";"):
                node = node.children.setdefault(frame, Node())
                node.samples += count
    return root


def _color(name: str) -> str:
    seed = sum(name.encode()) % 60
    return f"rgb(230,{100 + seed * 2},{40 + seed})"


def draw(root: Node, title: str) -> str:
    boxes: list[str] = []
    depth_max = 0
    scale = WIDTH / max(root.samples, 1)

    def walk(node: Node, name: str, x: float, depth: int) -> None:
        nonlocal depth_max
        width = node.samples * scale
        if width < MIN_WIDTH:
            return
        depth_max = max(depth_max, depth)
        share = 100 * node.samples / max(root.samples, 1)
        label = html.escape(f"{name} ({node.samples} samples, {share:.2f}%)")
        text = html.escape(name[: int(width / 7)]) if width > 30 else ""
        y = depth * ROW
        boxes.append(
            f'<g><title>{label}</title><rect x="{x:.1f}" y="{{Y{y}}}" width="{width:.1f}" '
            f'height="{ROW - 1}" fill="{_color(name)}"/>'
            f'<text x="{x + 2:.1f}" y="{{T{y}}}" font-size="11">{text}</text></g>'
        )
        for child_name, child in sorted(node.children.items()):
            walk(child, child_name, x, depth + 1)
            x += child.samples * scale

    walk(root, "all", 0.0, 0)
    height = (depth_max + 3) * ROW
    body = "\n".join(boxes)
    # Flame graph: the root at the bottom.
    for depth in range(depth_max + 1):
        y = depth * ROW
        body = body.replace(f"{{Y{y}}}", f"{height - (depth + 1) * ROW:.1f}")
        body = body.replace(f"{{T{y}}}", f"{height - depth * ROW - 4:.1f}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0f}" height="{height:.0f}" '
        f'font-family="monospace">\n<text x="4" y="12" font-size="12">'
        f"{html.escape(title)} ({root.samples} samples)</text>\n{body}\n</svg>\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks")
    parser.add_argument("out")
    parser.add_argument("--title", default="py-spy")
    parser.add_argument("--match", default="", help="only stacks containing this text")
    args = parser.parse_args()
    with open(args.out, "w") as out:
        out.write(draw(read(args.stacks, args.match), args.title))


if __name__ == "__main__":
    main()
