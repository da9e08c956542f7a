"""The docs site as a reader sees it: `mkdocs build --strict`, then every page opened in
a real headless Chromium (`tests/fixtures/chromium.py`) at a laptop's width.

What a browser alone shows: a Markdown table that did not become a table (its rows
left as text), an escaped `|` shown with its backslash, a flag or a name broken across
two lines (`--password-` over `stdin`), a table or the overview's diagram that has to be
scrolled sideways.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.chromium import Page, chromium_page
from tests.paths import REPO

LAPTOP_WIDTH_PX, LAPTOP_HEIGHT_PX = 1280, 800
PAGE_LOAD_TIMEOUT_SECONDS = 30

# One look at a page, as JSON. A word of a table's inline code is broken when its text
# spans more than one line box; a table or a diagram scrolls sideways when the box that
# clips it is narrower than what it holds.
LOOK = r"""(() => {
  const article = document.querySelector("article");
  const clipper = (element) => {
    for (let node = element.parentElement; node; node = node.parentElement) {
      if (["auto", "scroll", "hidden"].includes(getComputedStyle(node).overflowX)) return node;
    }
    return document.scrollingElement;
  };
  const sideways = (element) => {
    // A diagram scrolls in its own code box (Material's `pre > code`), a table in a box
    // around it.
    const box = element.tagName === "PRE" ? element.querySelector("code") || element
      : clipper(element);
    return box.scrollWidth > box.clientWidth;
  };
  const broken = [];
  for (const code of article.querySelectorAll("table code")) {
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        if (range.getClientRects().length > 1) broken.push(word[0]);
      }
    }
  }
  const tables = [...article.querySelectorAll("table")];
  return JSON.stringify({
    tables: tables.length,
    rows_as_text: [...article.querySelectorAll("p")].flatMap((p) => p.textContent.split("\n"))
      .filter((line) => /^\s*\|.*\|\s*$/.test(line)),
    escaped_pipes: article.textContent.includes("\\|"),
    broken_words: broken,
    wide_tables: tables.filter(sideways).map((t) => t.rows[0].textContent.trim()),
    wide_diagrams: [...article.querySelectorAll("pre")].filter(sideways)
      .map((pre) => pre.textContent.split("\n")[0]),
  });
})()"""


def build_site(config: Path, site_dir: Path) -> Path:
    """`mkdocs build --strict` of `config` into `site_dir`."""
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "mkdocs"), "build", "--strict", "--config-file",
         str(config), "--site-dir", str(site_dir)],
        cwd=config.parent, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return site_dir


def _value(page: Page, expression: str):
    answer = page.send("Runtime.evaluate", check=False, expression=expression, returnByValue=True)
    return (answer.get("result") or {}).get("value")


def look(page: Page, html: Path) -> dict:
    """What `LOOK` sees on one built page, once it has loaded and its scripts have run."""
    page.send("Page.navigate", url=html.as_uri())
    deadline = time.monotonic() + PAGE_LOAD_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        here = _value(page, "document.readyState === 'complete' && location.href")
        if here == html.as_uri():
            return json.loads(_value(page, LOOK))
        time.sleep(0.2)
    raise AssertionError(f"{html} did not load in {PAGE_LOAD_TIMEOUT_SECONDS} s")


def look_at_every_page(site: Path, profile: Path) -> dict[str, dict]:
    """Each page's source name (`fab.md`) and what Chromium shows of it."""
    pages = {}
    with chromium_page(profile) as page:
        page.open("about:blank")
        page.send("Emulation.setDeviceMetricsOverride", width=LAPTOP_WIDTH_PX,
                  height=LAPTOP_HEIGHT_PX, deviceScaleFactor=1, mobile=False)  # fmt: skip
        for html in sorted(site.glob("**/index.html")):
            folder = html.parent.relative_to(site)
            if folder.name != "search":
                pages[f"{folder.as_posix() if folder.parts else 'index'}.md"] = look(page, html)
    return pages


def markdown_tables(text: str) -> int:
    """The tables a page's Markdown holds: one delimiter row (`|---|---|`) each."""
    return len(re.findall(r"^\s*\|(?:\s*:?-{3,}:?\s*\|)+\s*$", text, re.M))


@pytest.fixture(scope="module")
def shown(tmp_path_factory) -> dict[str, dict]:
    site = build_site(REPO / "mkdocs.yml", tmp_path_factory.mktemp("site"))
    return look_at_every_page(site, tmp_path_factory.mktemp("chromium-profile"))


def _source(name: str) -> str:
    text = (REPO / "docs" / name).read_text()
    return text.replace('--8<-- "ARCHITECTURE.md"', (REPO / "ARCHITECTURE.md").read_text())


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_every_table_of_the_markdown_is_a_table_on_its_page(shown):
    assert {name: seen["tables"] for name, seen in shown.items()} == {
        name: markdown_tables(_source(name)) for name in shown
    }
    as_text = {name: seen["rows_as_text"] for name, seen in shown.items() if seen["rows_as_text"]}
    assert as_text == {}


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_no_page_shows_an_escaped_pipe(shown):
    assert [name for name, seen in shown.items() if seen["escaped_pipes"]] == []


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_no_word_of_a_tables_code_breaks_across_lines(shown):
    broken = {name: seen["broken_words"] for name, seen in shown.items() if seen["broken_words"]}
    assert broken == {}


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_no_table_scrolls_sideways_at_a_laptops_width(shown):
    wide = {name: seen["wide_tables"] for name, seen in shown.items() if seen["wide_tables"]}
    assert wide == {}


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_the_overviews_flow_diagram_fits_a_laptops_width(shown):
    assert "pulumi up" in (REPO / "docs" / "index.md").read_text().split("```text")[1]
    assert shown["index.md"]["wide_diagrams"] == []


def test_a_tables_code_keeps_every_letter_when_its_words_are_kept_whole():
    """docs/hooks/table_code.py only wraps words: a copied flag is the flag."""
    hook = runpy.run_path(str(REPO / "docs" / "hooks" / "table_code.py"))["on_page_content"]
    html = (
        "<table><tr><td><code>fab sweep [--name NAME] --param a&lt;b</code> and prose</td>"
        "</tr></table><p><code>fab sweep --name</code></p>"
    )
    kept = hook(html)
    assert re.sub(r"</?span[^>]*>", "", kept) == html
    assert '<span class="word">[--name NAME]</span>' in kept  # an option with its value
    assert '<span class="word">a&lt;b</span>' in kept
    assert kept.endswith("<p><code>fab sweep --name</code></p>")  # outside a table: as it was


# The looks themselves, on a planted site: each must see what it is there to see.
LONG_FLAG = "--a-flag-long-enough-to-be-broken-in-a-column-narrowed-by-the-other-one"
LONG_WORD = "Pneumonoultramicroscopicsilicovolcanoconiosis"
PLANTED_PAGE = f"""# Planted

| task | what it does |
|---|---|
| `fab sweep [--method grid\\|random\\|tpe]` | a search |
| x | `{LONG_FLAG}` and more words to fill it |

| one | two | three | four |
|---|---|---|---|
| {LONG_WORD} | {LONG_WORD} | {LONG_WORD} | {LONG_WORD} |

A paragraph, then a table with no blank line before it:
| a | b |
|---|---|
| 1 | 2 |

```text
a diagram wider than a laptop's page {"─" * 60}►
```
"""
PLANTED_CONFIG = "site_name: planted\ntheme:\n  name: material\n  font: false\n"


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_the_looks_see_a_planted_page_that_breaks_each_rule(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(PLANTED_PAGE)
    (tmp_path / "mkdocs.yml").write_text(PLANTED_CONFIG)
    site = build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    seen = look_at_every_page(site, tmp_path / "chromium-profile")["index.md"]
    assert seen["tables"] == 2 < markdown_tables(PLANTED_PAGE) == 3
    assert seen["rows_as_text"] != []
    assert seen["escaped_pipes"] is True
    assert seen["broken_words"] != []
    assert seen["wide_tables"] != [] and seen["wide_diagrams"] != []
