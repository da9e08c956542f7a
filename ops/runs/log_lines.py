"""A run's log as `fab logs` prints it: line by line as it comes, every line as
`ops.terminal_text.log_text` shows it, a line past LINE_CAP_CHARACTERS cut and said.

The log is the run's (or the bucket's) to write: an escape sequence in it is shown, not
obeyed, and one line of 256 MB without a newline is printed as its first
LINE_CAP_CHARACTERS and a note, in bounded memory (only the part of a line that is
shown is ever held).
"""

from __future__ import annotations

import codecs
from typing import TextIO

from ops.terminal_text import log_text

LINE_CAP_CHARACTERS = 16 * 1024
"""The longest line shown whole: the trainer's lines (a traceback's too) are far shorter."""


class LogLines:
    """A stream (`write`, `flush`) that writes a log on to `out`, each line made safe
    and cut at `cap` characters; `close` ends a line the log left open. `pty`: the log
    comes through a terminal, which ends each line with CR LF (its `onlcr`): the CR of
    those is the terminal's, not the log's, and is not shown."""

    def __init__(self, out: TextIO, cap: int = LINE_CAP_CHARACTERS, *, pty: bool = False) -> None:
        self._out, self._cap, self._pty = out, cap, pty
        self._held = ""
        """Through a terminal: a CR that ended the last write, which a LF may follow."""
        self._shown = 0
        """Characters of the current line written so far."""
        self._cut = 0
        """Characters of the current line past the cap, not written."""
        self._bytes = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write(self, text: str) -> int:
        written = len(text)
        if self._pty:
            text = (self._held + text).replace("\r\n", "\n")
            self._held = "\r" if text.endswith("\r") else ""
            text = text.removesuffix(self._held)
        *ended, open_part = text.split("\n")  # a newline alone: a CR or a VT is shown
        for line in ended:
            self._part(line)
            self._end_line()
        self._part(open_part)
        return written

    def write_bytes(self, data: bytes) -> None:
        """A block of the log as stored (UTF-8, a character split between two blocks
        included)."""
        self.write(self._bytes.decode(data))

    def _part(self, text: str) -> None:
        room = max(self._cap - self._shown, 0)
        if room:
            self._out.write(log_text(text[:room]))
            self._shown += min(len(text), room)
        self._cut += max(len(text) - room, 0)

    def _end_line(self) -> None:
        if self._cut:
            self._out.write(f" [… line cut: {self._cut:,} more characters not shown]")
        self._out.write("\n")
        self._shown = self._cut = 0

    def say(self, line: str) -> None:
        """A line of `fab`'s own among the log's (not the log's: shown as it is)."""
        if self._shown or self._cut:
            self._end_line()
        self._out.write(f"{line}\n")

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        """The log's end: a last line without a newline gets one (and its note)."""
        self.write(self._bytes.decode(b"", final=True))
        held, self._held = self._held, ""
        self._part(held)  # a CR no LF followed: the log's own
        if self._shown or self._cut:
            self._end_line()
        self.flush()
