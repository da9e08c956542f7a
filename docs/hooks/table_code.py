"""MkDocs hook: a word of inline code in a table is never broken across lines.

Material lets inline code break at any letter and a browser breaks text after a hyphen,
so a table's narrow column showed `--password-` over `stdin` and `fallbackVmSiz` over
`es`. Each word of a table's inline code is wrapped in a span that does not break
(`docs/stylesheets/extra.css`); a line still breaks between the words, so a long
command wraps as a sentence does. The text is unchanged: a copied flag is the flag.
`tests/test_docs_site.py` looks at the built site in Chromium.
"""

from __future__ import annotations

import re

CELL = re.compile(r"(<t[dh]\b[^>]*>)(.*?)(</t[dh]>)", re.S)
INLINE_CODE = re.compile(r"<code>(.*?)</code>", re.S)
# An optional flag with its value, `[--name NAME]`, stays whole too.
WORD = re.compile(r"\[[^\[\]<>]*\]|[^\s<>]+")


def _words_kept_whole(code: re.Match) -> str:
    words = WORD.sub(lambda word: f'<span class="word">{word[0]}</span>', code[1])
    return f"<code>{words}</code>"


def _cell(cell: re.Match) -> str:
    return cell[1] + INLINE_CODE.sub(_words_kept_whole, cell[2]) + cell[3]


def on_page_content(html: str, **_) -> str:
    return CELL.sub(_cell, html)
