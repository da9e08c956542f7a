"""The README, the docs and the code's comments point at things that exist, in the
repository.

`make docs` (mkdocs --strict) checks the links between docs pages; these check what it
cannot see: the README's links into docs/, the repository paths and modules every page
and every comment or docstring names (files move, and a page or a comment that names
the old place misleads its reader), and that no page sends its reader outside the
repository (the site and a clone hold only it).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize

import yaml

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


def _module_file(parts: list[str]):
    base = REPO.joinpath("pulumi" if parts[0] == "infra" else ".", *parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _names_a_module(dotted: str) -> bool:
    """A module, or one's attribute (a class's at most) that the module's text names:
    `ops.data.run_cache` is no attribute of `ops.data` once the module has moved."""
    parts = dotted.split(".")
    for n in range(len(parts), max(2, len(parts) - 2) - 1, -1):
        module = _module_file(parts[:n])
        if module is not None:
            return n == len(parts) or re.search(rf"\b{parts[n]}\b", module.read_text()) is not None
    return False


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
] + [REPO / "fabfile.py"]


# In code, a path stands bare: `trainer/loop/train.py` or (in pulumi/) `infra/aws/boxes.py`;
# not a path on the box or in a store (`/opt/...`, `<storageUri>/box/...`), nor a
# placeholder (`runs/<id>/`).
CODE_PATH = re.compile(
    r"(?<![\w./<>$-])((?:trainer|ops|pulumi|infra|box|stack|tests|docs|requirements)/"
    r"[^\s`'\"(),;:\]]*)"
)
# `ops.runs.records`, `box.watchdog_config.GUARD_SETTINGS`; not a file name (`box.json`).
CODE_DOTTED_NAME = re.compile(r"(?<![\w./-])((?:trainer|ops|infra|box|stack)(?:\.\w+)+)")
FILE_SUFFIXES = ("json", "jsonl", "py", "md", "sh", "yaml", "yml", "csv", "txt", "pt", "tar")


@functools.cache
def _comments_and_docstrings(path) -> list[str]:
    """The comments of a file, and for Python every string that stands as a statement
    (a docstring, an attribute's docstring)."""
    text = path.read_text()
    if path.suffix != ".py":
        return [line for line in text.splitlines() if line.lstrip().startswith("#")]
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    found = [token.string for token in tokens if token.type == tokenize.COMMENT]
    return found + [
        node.value.value
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]


def _paths_named(text: str) -> list[str]:
    paths = [path.rstrip(".") for path in CODE_PATH.findall(text)]
    return [path for path in paths if not any(mark in path for mark in "<>{}*$")]


def _code_names_something(path: str) -> bool:
    return _names_something(f"pulumi/{path}" if path.startswith("infra/") else path)


def _dotted_names(text: str) -> list[str]:
    names = [name.rstrip(".") for name in CODE_DOTTED_NAME.findall(text)]
    return [name for name in names if name.rpartition(".")[2] not in FILE_SUFFIXES]


def _missing_in_code(find, exists) -> list[str]:
    """`path: name` of each name `find` sees in a comment or docstring of ours that
    `exists` does not find."""
    return [
        f"{path.relative_to(REPO)}: {named}"
        for path in CODE
        for text in _comments_and_docstrings(path)
        for named in find(text)
        if not exists(named)
    ]


def test_every_repository_path_a_comment_or_docstring_names_exists():
    assert _missing_in_code(_paths_named, _code_names_something) == []


def test_every_module_a_comment_or_docstring_names_exists():
    assert _missing_in_code(_dotted_names, _names_a_module) == []


def test_a_gone_path_or_module_in_a_comment_is_caught(tmp_path):
    code = tmp_path / "policies.py"
    code.write_text(
        '"""Reads the stack (infra/config.py) and ops.data.run_cache."""\n'
        "# the floor of stack/config.py, as `box.json` and /opt/box/x say\n"
        "PATH = 'trainer/gone.py'  # a string that is no docstring is code\n"
    )
    texts = _comments_and_docstrings(code)
    named = [path for text in texts for path in _paths_named(text)]
    assert named == ["stack/config.py", "infra/config.py"]
    assert [path for path in named if not _code_names_something(path)] == ["infra/config.py"]
    dotted = [name for text in texts for name in _dotted_names(text)]
    assert [name for name in dotted if not _names_a_module(name)] == ["ops.data.run_cache"]


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


def test_the_architecture_page_is_architecture_md_included_as_it_stands():
    """One text: the site's page includes ARCHITECTURE.md when it is built, and a
    missing file fails the build (`check_paths`); of its own, the page has a line and
    the picture of the trees, no heading."""
    page = (REPO / "docs" / "architecture.md").read_text()
    assert '--8<-- "ARCHITECTURE.md"' in page.splitlines()
    assert "#" not in page.partition("--8<--")[0].replace("<!--", ""), "no text of its own"
    extensions = yaml.safe_load((REPO / "mkdocs.yml").read_text())["markdown_extensions"]
    options = next(e["pymdownx.snippets"] for e in extensions if "pymdownx.snippets" in e)
    assert options["check_paths"] is True and options["base_path"] == ["."]


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


NAV_GROUPS = ["Get started", "Use", "Reference", "Develop"]
# The pages written for whoever changes the code rather than runs it.
CONTRIBUTOR_PAGES = {"develop.md", "architecture.md", "box-programs.md", "cloud-references.md"}


def _nav_groups() -> dict[str, list[str]]:
    """Each top-level group of mkdocs.yml's nav and the pages under it."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    groups = {}
    for entry in nav:
        ((group, pages),) = entry.items()
        groups[group] = [page for item in pages for page in item.values()]
    return groups


def test_the_nav_is_four_groups_in_a_newcomers_order():
    assert list(_nav_groups()) == NAV_GROUPS


def test_the_contributors_pages_are_in_develop_and_only_there():
    groups = _nav_groups()
    assert set(groups["Develop"]) == CONTRIBUTOR_PAGES
    assert [p for g in NAV_GROUPS[:3] for p in groups[g] if p in CONTRIBUTOR_PAGES] == []


def test_every_page_is_in_the_nav_once():
    listed = [page for pages in _nav_groups().values() for page in pages]
    assert sorted(listed) == sorted(p.name for p in (REPO / "docs").glob("*.md"))


# `(docs/clouds.md, 'When the cloud has no GPU')`, `docs/costs.md`, "What a run cost": a
# section of a page, by its heading or its bold lead (`**Throughput, measured:**`).
SECTION_REFERENCE = re.compile(r"docs/([\w-]+\.md)`?, [\"']([^\"'\n]+)[\"']")


def _sections(page_text: str) -> set[str]:
    headings = re.findall(r"^#+ (.+?)\s*$", page_text, re.M)
    leads = re.findall(r"\*\*([^*]+?):?\*\*", page_text)
    return {name.replace("`", "").strip() for name in headings + leads}


def _names_a_section(page: str, section: str) -> bool:
    """The section by its whole name, or a heading's before its colon ("After `pulumi
    destroy`" for "After `pulumi destroy`: `fab leaks`")."""
    if not (REPO / "docs" / page).is_file():
        return False
    name = section.replace("`", "")
    found = _sections((REPO / "docs" / page).read_text())
    return any(heading == name or heading.startswith(f"{name}:") for heading in found)


def _sections_missing(text: str) -> list[str]:
    return [
        f"{page}, {section!r}"
        for page, section in SECTION_REFERENCE.findall(text)
        if not _names_a_section(page, section)
    ]


def test_every_section_of_the_docs_the_code_messages_or_pages_name_exists():
    """A message that sends its reader to a section (placement's 'When the cloud has no
    GPU') needs that section there: pages move and split."""
    stack_files = sorted(REPO.glob("Pulumi.*.yaml"))
    missing = [
        f"{path.relative_to(REPO)}: {found}"
        for path in [*CODE, *PAGES, *stack_files]
        for found in _sections_missing(path.read_text())
    ]
    assert missing == []


def test_a_section_that_is_gone_is_caught():
    assert _sections_missing("(docs/clouds.md, 'When the cloud has no GPU')") == []
    assert _sections_missing('`docs/costs.md`, "Throughput, measured"') == []
    assert _sections_missing('(docs/costs.md, "After `pulumi destroy`")') == []
    assert _sections_missing('(docs/costs.md, "After")') != []
    assert _sections_missing("(docs/clouds.md, 'Every value is one the clouds accept')") != []
    assert _sections_missing('(docs/gone.md, "Anything")') == ["gone.md, 'Anything'"]
