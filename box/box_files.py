"""The box's files as cloud-init installs them: the source, less its comments.

EC2 takes at most 16 KB of user data, gzipped here; the commented box programs
are over that. So the installed copies leave out comments, docstrings and the
comment lines of scripts and units, and say where the full source is. Token-exact
(never re-printed from a syntax tree): the same source gives the same bytes on
every Python version, because a changed user data replaces the VM.

Standard library only and free of pulumi imports.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

BOX_SOURCE_DIR = Path(__file__).resolve().parent
_SKIPPED = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
_STATEMENT_START = (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, None)
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


def _source_note(name: str) -> str:
    return f"# box/{name}, comments left out\n"


def _significant(tokens: list[tokenize.TokenInfo], index: int, step: int):
    index += step
    while 0 <= index < len(tokens) and tokens[index].type in _SKIPPED[:2]:
        index += step
    return tokens[index] if 0 <= index < len(tokens) else None


def _is_docstring(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """A string that is a whole statement: module, class, function or field docstring."""
    before, after = _significant(tokens, index, -1), _significant(tokens, index, 1)
    starts = before is None or before.type in _STATEMENT_START
    return starts and after is not None and after.type in (tokenize.NEWLINE, tokenize.ENDMARKER)


def _alone_in_block(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """Whether removing this statement would leave its block empty."""
    before = _significant(tokens, index, -1)
    after_newline = _significant(tokens, index + 1, 1)
    if before is None or before.type != tokenize.INDENT:
        return False
    return after_newline is None or after_newline.type in (tokenize.DEDENT, tokenize.ENDMARKER)


def strip_python(text: str, name: str) -> str:
    lines = text.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    replace: dict[int, str] = {}  # line index -> new text ("" drops the line)
    kept_strings: set[int] = set()  # lines inside strings that stay: never touched
    for index, token in enumerate(tokens):
        row, column = token.start[0] - 1, token.start[1]
        if token.type == tokenize.COMMENT and not (row == 0 and token.string.startswith("#!")):
            head = replace.get(row, lines[row])[:column].rstrip()
            replace[row] = head + "\n" if head else ""
        elif token.type == tokenize.STRING and _is_docstring(tokens, index):
            for covered in range(row, token.end[0]):
                replace[covered] = ""
            if _alone_in_block(tokens, index):
                replace[row] = " " * column + "pass\n"
        elif token.type == tokenize.STRING:
            kept_strings.update(range(row + 1, token.end[0]))
    out = []
    for row, line in enumerate(lines):
        line = line if row in kept_strings else replace.get(row, line)
        if line.strip() or row in kept_strings:
            out.append(line)
    shebang = out[:1] if out and out[0].startswith("#!") else []
    return "".join([*shebang, _source_note(name), *out[len(shebang) :]])


def strip_comment_lines(text: str, name: str) -> str:
    """Shell scripts and systemd units: comment and blank lines go, heredoc bodies stay."""
    lines = text.splitlines(keepends=True)
    out, heredoc_end = [], None
    for row, line in enumerate(lines):
        if heredoc_end is not None:
            heredoc_end = None if line.strip() == heredoc_end else heredoc_end
            out.append(line)
            continue
        match = _HEREDOC.search(line)
        if match and not line.lstrip().startswith("#"):
            heredoc_end = match.group(1)
        if row == 0 or (line.strip() and not line.lstrip().startswith("#")):
            out.append(line)
    shebang = out[:1] if out and out[0].startswith("#!") else []
    return "".join([*shebang, _source_note(name), *out[len(shebang) :]])


def installed_text(source: Path) -> str:
    text = source.read_text()
    if source.suffix == ".py":
        return strip_python(text, source.name)
    return strip_comment_lines(text, source.name)
