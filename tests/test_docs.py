"""The README and the docs point at things that exist, in the repository.

`make docs` (mkdocs --strict) checks the links between docs pages; these check what it
cannot see: the README's links into docs/, the repository paths every page names
(files move, and a page that names the old place misleads its reader), and that no
page sends its reader outside the repository (the site and a clone hold only it).
"""

from __future__ import annotations

import re
import subprocess

from tests.paths import REPO

PAGES = [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted((REPO / "docs").glob("*.md"))]
RELATIVE_LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)]*)?\)")
# `trainer/loop/train.py`, `box/`, or `ops/plan.hourly_price` (a module's
# attribute); not globs or placeholders (`tests/infra/test_watchdog_*.py`, `runs/<id>/`).
REPO_PATH = re.compile(
    r"`((?:trainer|ops|pulumi|box|stack|tests|requirements|docs|\.ci)/[\w./-]*)`"
)
# `trainer.checkpoints.resume.misfit`, `stack.catalog.VmSize.hourly_price_usd()`: a module,
# then at most a class and its attribute. `infra` is the package inside pulumi/.
DOTTED_NAME = re.compile(r"`((?:trainer|ops|infra|box|stack)(?:\.\w+)+)[`(]")
# A path that climbs out: `../shared/x`, or a link's target, which counts from its page.
CLIMBING_PATH = re.compile(r"`(\.\./[^`\s]*)`")
# A document by its name (README.md, DESIGN.md): one of the repository's own, at its root.
DOCUMENT_NAME = re.compile(r"\b([A-Z][A-Z_]+\.md)\b")


def _names_something(path: str) -> bool:
    if (REPO / path).exists():
        return True
    module, _, _attribute = path.rpartition(".")
    return bool(module) and (REPO / f"{module}.py").is_file()


def _is_module(parts: list[str]) -> bool:
    base = REPO.joinpath("pulumi" if parts[0] == "infra" else ".", *parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _names_a_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return any(_is_module(parts[:n]) for n in range(max(2, len(parts) - 2), len(parts) + 1))


def test_the_readme_links_only_to_files_that_exist():
    text = (REPO / "README.md").read_text()
    targets = RELATIVE_LINK.findall(text)
    assert "docs/index.md" in targets
    assert [target for target in targets if not (REPO / target).exists()] == []


def test_every_repository_path_the_docs_name_exists():
    missing = [
        f"{page.relative_to(REPO)}: {path}"
        for page in PAGES
        for path in REPO_PATH.findall(page.read_text())
        if not _names_something(path)
    ]
    assert missing == []


def test_every_module_the_docs_name_exists():
    missing = [
        f"{page.relative_to(REPO)}: {name}"
        for page in PAGES
        for name in DOTTED_NAME.findall(page.read_text())
        if not _names_a_module(name)
    ]
    assert missing == []


def test_a_moved_module_named_by_a_page_is_caught():
    assert not _names_something("trainer/checkpoint.py")
    assert not _names_something("trainer/resume.misfit")
    assert _names_something("trainer/checkpoints/resume.misfit")
    assert not _names_a_module("trainer.resume.misfit")
    assert not _names_a_module("trainer.checkpoint")
    assert _names_a_module("trainer.checkpoints.resume.misfit")
    assert _names_a_module("stack.catalog.VmSize.hourly_price_usd")
    assert _names_a_module("stack.config")


def _outside_the_repository(page, text: str) -> list[str]:
    """What `text` (on `page`) names outside the repository."""
    links = [(page.parent / target).resolve() for target in RELATIVE_LINK.findall(text)]
    return [
        *(f"`{path}`" for path in CLIMBING_PATH.findall(text)),
        *(str(link) for link in links if not link.is_relative_to(REPO.resolve())),
        *(name for name in DOCUMENT_NAME.findall(text) if not (REPO / name).is_file()),
    ]


def test_no_page_names_a_path_outside_the_repository():
    outside = [
        f"{page.relative_to(REPO)}: {found}"
        for page in PAGES
        for found in _outside_the_repository(page, page.read_text())
    ]
    assert outside == []


def test_a_path_outside_the_repository_is_caught():
    page = REPO / "ARCHITECTURE.md"
    assert _outside_the_repository(page, "see `../shared/DESIGN.md`") == [
        "`../shared/DESIGN.md`",
        "DESIGN.md",
    ]
    assert _outside_the_repository(page, "[design](../shared/DESIGN.md)") != []
    assert _outside_the_repository(REPO / "docs" / "fab.md", "[arch](../ARCHITECTURE.md)") == []


CODE = [
    path
    for tree in ("trainer", "ops", "pulumi", "box", "stack", "tests")
    for path in sorted((REPO / tree).rglob("*"))
    if path.suffix in (".py", ".sh", ".service", ".timer") and path != REPO / "tests/test_docs.py"
]


def test_no_comment_or_docstring_names_a_document_outside_the_repository():
    outside = [
        f"{path.relative_to(REPO)}: {name}"
        for path in CODE
        for name in [
            *DOCUMENT_NAME.findall(path.read_text()),
            *re.findall(r"\.\./shared\b", path.read_text()),
        ]
        if not (REPO / name).is_file()
    ]
    assert outside == []


def test_the_architecture_page_is_architecture_md_as_it_stands():
    """A code host shows docs/architecture.md as it is (an include line would be all it
    showed), so the page is a copy, kept equal here."""
    page, source = REPO / "docs" / "architecture.md", REPO / "ARCHITECTURE.md"
    assert page.read_text() == source.read_text(), (
        "docs/architecture.md differs from ARCHITECTURE.md: cp ARCHITECTURE.md docs/architecture.md"
    )


def test_the_readme_serves_the_docs_with_a_make_target_that_installs_mkdocs():
    """`.venv/bin/mkdocs` is not there after `make demo`: the README names the target."""
    readme, makefile = (REPO / "README.md").read_text(), (REPO / "Makefile").read_text()
    assert "make docs-serve" in readme and ".venv/bin/mkdocs serve" not in readme
    assert re.search(r"^docs-serve: \$\(STAMP\)\n\t.*\.venv/bin/mkdocs serve", makefile, re.M)
    assert "mkdocs" in (REPO / "pyproject.toml").read_text().split("dev = [", 1)[1]


def test_refreshing_the_prices_installs_what_the_demo_does_and_no_more(tmp_path):
    # make's own plan, with the demo's install done and the full one not.
    demo_done = tmp_path / "demo-installed"
    demo_done.write_text("")
    plan = subprocess.run(
        ["make", "-n", "prices", f"DEMO_STAMP={demo_done}", f"STAMP={tmp_path / 'none'}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "ops.plan.refresh_prices" in plan.stdout
    assert "pip install" not in plan.stdout, plan.stdout
