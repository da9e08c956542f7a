"""Text from outside `fab` made safe to print: what a run, a bucket, a box or a cloud
wrote reaches the terminal as letters, never as an effect.

Anyone who can write the stack's bucket (or give a run its `--name`) writes what `fab
runs`, `fab logs`, `fab status`, `fab tensorboard` and `fab leaks` print. A terminal
acts on escape sequences: OSC 52 writes the clipboard, OSC 0 the window's title, OSC 8
makes a link, CSI 2J clears the screen; and rich acts on its markup (`[link=...]` is an
OSC 8 link, a stray `[/bold]` a MarkupError that ends the command). So every such
string goes through `printable` (one line: a name, a key, a note) or `log_text` (a log:
its newlines kept): each control, format or unassigned character, each line or
paragraph separator, and the backslash become a visible escape (`\\x1b`, `\\u202e`,
`\\x5c`: a backslash in the text cannot fake one). Where rich prints it, `markup_safe`
escapes rich's markup too, or the printable text goes in a `rich.text.Text`, which
rich never parses (`fab runs`' cells).
"""

from __future__ import annotations

import unicodedata

from rich.console import Console
from rich.markup import escape

ESCAPED_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
"""Controls (ESC, CR, DEL, C1's CSI), formats (a bidi override, a zero-width space),
surrogates, private use, unassigned; the line and paragraph separators."""
LOG_KEPT = "\n\t"
"""What a log keeps as it is: its lines, and the tabs a traceback or a table holds."""
ELLIPSIS = "…"
NOTE_CHARACTERS = 400
"""Of one note: what storage or a run's files said, which a bucket's writer chose."""


def _escaped(character: str) -> str:
    if character != "\\" and unicodedata.category(character) not in ESCAPED_CATEGORIES:
        return character
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, limit: int | None = None) -> str:
    """`text` (anything: `str()` of it) on one line, every character a terminal could
    act on written as a visible escape, cut to `limit` characters (the last an `…`)."""
    shown = "".join(_escaped(character) for character in str(text))
    return shown if limit is None else cut(shown, limit)


def cut(text: str, limit: int) -> str:
    """`text` at most `limit` characters long, the last an `…` where it was longer."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def log_text(text: str) -> str:
    """A log as `printable` shows a line, its newlines and tabs kept."""
    return "".join(
        character if character in LOG_KEPT else _escaped(character) for character in text
    )


def markup_safe(text: object, limit: int | None = None) -> str:
    """`printable(text)` for a string rich reads as markup: `[bold]` stays those letters."""
    return escape(printable(text, limit))


def say_note(console: Console, text: object) -> None:
    """`note: TEXT` in yellow on `console`: a line about what could not be read, whose
    words are partly the store's or the run's."""
    console.print(f"[yellow]note:[/] {markup_safe(text, NOTE_CHARACTERS)}")
