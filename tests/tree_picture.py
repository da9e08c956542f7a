"""docs/img/trees.svg, drawn from the code: the five trees, where each runs, its folders,
and an arrow wherever one tree imports another.

The arrows come from the imports themselves (`tests.test_tree_boundaries.arrows`, the
walker that enforces the table), where each tree runs from ARCHITECTURE.md's table;
`tests/test_tree_picture.py` fails when the committed picture is not this drawing.
Redraw it with `python -m tests.tree_picture`.

Layout: a tree no other imports from sits at the top, the trees everything imports at
the bottom (each row one step of imports below the one above it); a row's trees are
ordered under what they import, so most arrows run straight down. An arrow that skips
a row goes round the outside, on the side of the tree it starts from.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from tests.paths import REPO
from tests.test_tree_boundaries import Tree, arrows, trees

PICTURE = REPO / "docs" / "img" / "trees.svg"
NODE_WIDTH, LINE_HEIGHT, PADDING = 300, 18, 12
COLUMN_GAP, ROW_GAP, MARGIN = 60, 80, 50
CHARACTERS_PER_LINE = 34  # 13 px monospace in NODE_WIDTH less the padding


@dataclass(frozen=True)
class Node:
    tree: str
    lines: tuple[str, ...]
    """The tree's name, where it runs, then its folders."""

    @property
    def height(self) -> int:
        return 2 * PADDING + LINE_HEIGHT * len(self.lines)


def _where_it_runs(tree: Tree) -> str:
    """The table's "runs", without its aside (after a parenthesis or a colon)."""
    return re.split(r" \(|:", tree.runs)[0].replace("`", "").strip()


def _node(repo: Path, tree: Tree) -> Node:
    folders = sorted(
        folder.name
        for folder in (repo / tree.name).iterdir()
        if folder.is_dir() and any(folder.glob("*.py"))
    )
    wrapped = textwrap.wrap(" ".join(folders), CHARACTERS_PER_LINE) if folders else []
    return Node(tree.name, (f"{tree.name}/", _where_it_runs(tree), *wrapped))


def _rows(names: set[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Top row first: a tree's row is one above the lowest it can stand on."""
    depth: dict[str, int] = {}

    def depth_of(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((depth_of(b) for a, b in edges if a == name), default=-1)
        return depth[name]

    rows: list[list[str]] = [[] for _ in range(1 + max(map(depth_of, names)))]
    for name in sorted(names):
        rows[-1 - depth_of(name)].append(name)
    return rows


def _place(rows: list[list[str]], edges, heights: dict[str, int]) -> dict[str, tuple]:
    """Each tree's (x, y) corner, bottom row first so a row can sit under its imports."""
    width = max(len(row) for row in rows) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    tops, y = [], MARGIN
    for row in rows:
        tops.append(y)
        y += max(heights[name] for name in row) + ROW_GAP
    at: dict[str, tuple] = {}
    for row, top in reversed(list(zip(rows, tops, strict=True))):
        centres = {n: [at[b][0] for a, b in edges if a == n and b in at] for n in row}
        row.sort(key=lambda n: (sum(centres[n]) / len(centres[n]) if centres[n] else 0, n))
        left = MARGIN + (width - len(row) * (NODE_WIDTH + COLUMN_GAP) + COLUMN_GAP) / 2
        for i, name in enumerate(row):
            at[name] = (left + i * (NODE_WIDTH + COLUMN_GAP), top)
    return at


def _arrow(start, end, side: float | None) -> str:
    """A curve down from `start` to `end`, round the outside at `side` when given."""
    (x1, y1), (x2, y2) = start, end
    if side is None:
        middle = (y1 + y2) / 2
        return f"M{x1:g},{y1:g} C{x1:g},{middle:g} {x2:g},{middle:g} {x2:g},{y2:g}"
    down, up = y1 + ROW_GAP / 2, y2 - ROW_GAP / 2
    return (
        f"M{x1:g},{y1:g} C{x1:g},{down:g} {side:g},{y1:g} {side:g},{down:g} "
        f"L{side:g},{up:g} C{side:g},{y2:g} {x2:g},{up:g} {x2:g},{y2:g}"
    )


def _ends(name, edges, at, sides, outgoing: bool) -> dict[tuple[str, str], float]:
    """Where each arrow leaves a box's bottom (or meets its top), spread in the order it
    comes from (the box at its other end, or the side it goes round), so that arrows do
    not cross at the box."""

    def other_end(edge: tuple[str, str]) -> float:
        return sides.get(edge, at[edge[1 if outgoing else 0]][0] + NODE_WIDTH / 2)

    mine = sorted((e for e in edges if e[0 if outgoing else 1] == name), key=other_end)
    x = at[name][0]
    return {e: x + NODE_WIDTH * (i + 1) / (len(mine) + 1) for i, e in enumerate(mine)}


def draw(repo: Path = REPO) -> str:
    """The picture, as SVG text."""
    known = trees((repo / "ARCHITECTURE.md").read_text())
    nodes = {name: _node(repo, tree) for name, tree in known.items()}
    edges = arrows(repo, known)
    rows = _rows(set(nodes), edges)
    at = _place(rows, edges, {n: node.height for n, node in nodes.items()})
    row_of = {name: i for i, row in enumerate(rows) for name in row}
    width = 2 * MARGIN + max(len(r) for r in rows) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    height = max(y + nodes[n].height for n, (_x, y) in at.items()) + MARGIN
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:g} {height:g}" '
        f'width="{width:g}" height="{height:g}" font-family="monospace" font-size="13">',
        "<title>The trees of glucose-training and their imports: an arrow from a tree "
        "to the one it imports</title>",
        '<defs><marker id="head" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>',
    ]
    sides = {  # an arrow that skips a row goes round the side its tree stands on
        (a, b): MARGIN / 2 if at[a][0] + NODE_WIDTH / 2 < width / 2 else width - MARGIN / 2
        for a, b in edges
        if row_of[b] - row_of[a] > 1
    }
    leaving = {e: x for n in nodes for e, x in _ends(n, edges, at, sides, True).items()}
    meeting = {e: x for n in nodes for e, x in _ends(n, edges, at, sides, False).items()}
    for edge in sorted(edges):
        source, target = edge
        start = (leaving[edge], at[source][1] + nodes[source].height)
        path = _arrow(start, (meeting[edge], at[target][1]), sides.get(edge))
        parts.append(
            f'<path d="{path}" fill="none" stroke="#555" stroke-width="1.5" '
            f'marker-end="url(#head)"><title>{source}/ imports {target}/</title></path>'
        )
    for name, node in sorted(nodes.items()):
        x, y = at[name]
        parts.append(
            f'<rect x="{x:g}" y="{y:g}" width="{NODE_WIDTH}" height="{node.height}" rx="6" '
            'fill="#f3f4f8" stroke="#3f51b5" stroke-width="1.5"/>'
        )
        for i, line in enumerate(node.lines):
            style = ' font-weight="bold" font-size="15"' if i == 0 else ""
            colour = "#222" if i < 2 else "#555"
            baseline = y + PADDING + LINE_HEIGHT * (i + 1) - 5
            parts.append(
                f'<text x="{x + PADDING:g}" y="{baseline:g}" fill="{colour}"{style}>'
                f"{escape(line)}</text>"
            )
    return "\n".join([*parts, "</svg>", ""])


if __name__ == "__main__":
    PICTURE.parent.mkdir(exist_ok=True)
    PICTURE.write_text(draw())
    print(f"wrote {PICTURE.relative_to(REPO)}")
