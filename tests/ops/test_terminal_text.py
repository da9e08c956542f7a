"""The one sanitizer of text from outside: a string shows as letters, never as an effect
on the terminal or in rich."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ops.terminal_text import log_text, markup_safe, printable

COLOURS = re.compile(r"\x1b\[[0-9;]*m")
"""The one escape rich itself writes here: SGR, a colour or a weight."""
HOSTILE = "x[/bold] \x1b]52;c;aGk=\x07 \x1b]0;title\x07 \x1b[2J [link=http://evil]y[/link]"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[31mred", "\\x1b[31mred"),  # an ANSI colour is letters, not a colour
        ("\x1b]8;;http://x\x07link", "\\x1b]8;;http://x\\x07link"),  # nor a hyperlink
        ("a\u202eb\u200bc", "a\\u202eb\\u200bc"),  # nor a bidi override, nor a hidden mark
        ("line\nnext\r", "line\\x0anext\\x0d"),  # one name, one line
        ("a\u2028b\x9b2J", "a\\u2028b\\x9b2J"),  # a line separator; C1's one-byte CSI
        ("C:\\x41", "C:\\x5cx41"),  # a backslash cannot fake an escape
        ("[bold]x[/bold] é 中", "[bold]x[/bold] é 中"),  # printed plain: markup is letters
    ],
)
def test_a_string_from_outside_is_printable_as_it_is_not_as_an_effect(raw, shown):
    assert printable(raw) == shown


def test_a_long_string_is_cut_and_says_so():
    assert printable("x" * 200, 80) == "x" * 79 + "…"
    assert printable("x" * 200) == "x" * 200


def test_a_log_keeps_its_lines_and_tabs_and_escapes_the_rest():
    assert log_text("a\tb\n\x1b[2Jc\r\n") == "a\tb\n\\x1b[2Jc\\x0d\n"


def _rendered(*renderables) -> str:
    """What a colour terminal would get, rich's own colours taken out: the text, and any
    escape that came from the text."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=300, color_system="truecolor")
    for renderable in renderables:
        console.print(renderable)
    return COLOURS.sub("", out.getvalue())


def test_markup_from_outside_is_letters_in_rich_not_a_link_nor_an_error():
    shown = _rendered(f"[yellow]note:[/] {markup_safe(HOSTILE)}")
    assert "x[/bold]" in shown and "[link=http://evil]y[/link]" in shown
    assert "\x1b" not in shown


def test_a_table_cell_from_outside_is_letters():
    grid = Table()
    grid.add_column("name")
    grid.add_row(Text(printable(HOSTILE)))  # as `fab runs` makes its cells
    shown = _rendered(grid)
    assert "[link=http://evil]y[/link]" in shown
    assert "\x1b" not in shown
