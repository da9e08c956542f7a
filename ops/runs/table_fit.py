"""A table made to fit the terminal by priority, as `sky status` fits its own: never a
word cut short.

Each column says how it may give way, tried in this order until the table fits:
its header's shorter form (`val MAE` for `best val MAE`); its cells' brief forms (a
torn run's state without its reason, which a note above the table says); a cell of
many words (`lr=0.001 dropout=0.2 seed=1`) keeping its first words and how many it
left out (`lr=0.001 +2`); and last the whole column left out, the least needed first,
its name said once under the table. A column kept is shown whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.cells import cell_len

COLUMN_GAP = 3
"""Between two columns of the table: a space, the rule, a space."""
ALWAYS = 100
"""A column's `keep` for one the table never leaves out (the run id)."""
WORDS_KEPT_CHARS = 16
"""A cell of many words keeps at least this much (or its first word)."""


@dataclass(frozen=True)
class Column:
    header: str
    short: str = ""
    """A shorter header, taken when the table is too wide."""
    keep: int = 0
    """The least `keep` is left out first; ALWAYS never."""
    words: bool = False
    """Its cells may keep their first words only (`+N`: how many it left out)."""
    justify: str = "left"


@dataclass(frozen=True)
class Cell:
    text: str
    brief: str | None = None
    """What it shows when the table is too wide (None: the same)."""


@dataclass
class Fitted:
    """The columns kept, their headers and their rows' cells, and the columns left out."""

    columns: list[Column]
    headers: list[str]
    rows: list[list[str]]
    left_out: list[str] = field(default_factory=list)


def fit(columns: list[Column], rows: list[list[Cell]], width: int) -> Fitted:
    """The table of `columns` and `rows` in `width` terminal cells, if it can be: each
    step of the module's order taken only while the table is still too wide."""
    table = _Table([column.header for column in columns], [[c.text for c in r] for r in rows])
    if table.width() > width:
        table.headers = [column.short or column.header for column in columns]
    order = sorted(range(len(columns)), key=lambda k: columns[k].keep)
    for index in order:
        if table.width() <= width:
            break
        for row, cells in zip(table.rows, rows, strict=True):
            row[index] = cells[index].brief if cells[index].brief is not None else row[index]
    for words_too in (False, True):  # a words column gives way by words first
        for index in order:
            if table.width() <= width:
                break
            if columns[index].words and not words_too:
                table.fewer_words(index, width)
            elif columns[index].keep < ALWAYS:
                table.kept.discard(index)
    kept = sorted(table.kept)
    return Fitted(
        columns=[columns[k] for k in kept],
        headers=[table.headers[k] for k in kept],
        rows=[[row[k] for k in kept] for row in table.rows],
        left_out=[columns[k].header for k in range(len(columns)) if k not in table.kept],
    )


@dataclass
class _Table:
    headers: list[str]
    rows: list[list[str]]
    kept: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.kept = set(range(len(self.headers)))

    def column_width(self, index: int) -> int:
        return max([cell_len(self.headers[index]), *(cell_len(row[index]) for row in self.rows)])

    def width(self) -> int:
        widths = [self.column_width(index) for index in self.kept]
        return sum(widths) + COLUMN_GAP * max(len(widths) - 1, 0)

    def fewer_words(self, index: int, width: int) -> None:
        """Column `index`'s cells cut to whole words, as few as the width asks and no
        fewer than WORDS_KEPT_CHARS hold."""
        room = self.column_width(index) - (self.width() - width)
        room = max(room, WORDS_KEPT_CHARS, cell_len(self.headers[index]))
        for row in self.rows:
            row[index] = _first_words(row[index], room)


def _first_words(text: str, room: int) -> str:
    """`text`'s first words and `+N` (the words left out), within `room` where one word
    and its count fit; the first word always."""
    words = text.split(" ")
    if cell_len(text) <= room:
        return text
    for count in range(len(words) - 1, 0, -1):
        shown = f"{' '.join(words[:count])} +{len(words) - count}"
        if cell_len(shown) <= room or count == 1:
            return shown
    return text
