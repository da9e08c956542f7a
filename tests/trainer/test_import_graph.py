"""trainer/ is a tree of parts, not a web: no module imports, directly or through
others, one that imports it back, and no package another that imports it back. The
same holds inside ops/, stack/, box/ and pulumi/.

Every written import counts, wherever it stands: at the top, inside a function (a
late import only hides a cycle until the wrong module is imported first) or under
`TYPE_CHECKING`. A package's `__init__` that a submodule's own import runs on the way
is not an edge of that submodule: only what the code names is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

TRAINER = REPO / "trainer"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path) -> dict[str, Path]:
    return {_module_name(path, root): path for path in root.rglob("*.py")}


def _imported(node: ast.AST, here: str, is_package: bool, known: set[str]) -> set[str]:
    """The trainer modules one import statement names."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & known
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        anchor = here.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    names = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        names.add(submodule if submodule in known else base)
    return names & known


def import_graph(root: Path | None = None) -> dict[str, set[str]]:
    """Each module of the package `root` (trainer/) and the modules of it it imports."""
    modules = _modules(root or TRAINER)
    known = set(modules)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            edges |= _imported(node, name, is_package, known)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_inside_trainer():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("tree", ["ops", "stack", "box", "pulumi/infra"])
def test_no_import_cycle_inside_the_other_trees(tree):
    assert cycles(import_graph(REPO / tree)) == []


def test_the_cycle_finder_sees_a_cycle_through_a_late_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_holds_late_and_type_checking_imports(tmp_path, monkeypatch):
    package = tmp_path / "trainer"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "one.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from trainer.sub import two\n"
        "def late():\n    from trainer import three\n"
    )
    (package / "sub" / "two.py").write_text("from . import four\nfrom ..one import late\n")
    (package / "three.py").write_text("import trainer.sub.two\n")
    (package / "sub" / "four.py").write_text("")
    monkeypatch.setattr(f"{__name__}.TRAINER", package)
    graph = import_graph()
    assert graph["trainer.one"] == {"trainer.sub.two", "trainer.three"}
    assert graph["trainer.sub.two"] == {"trainer.sub.four", "trainer.one"}
    assert graph["trainer.three"] == {"trainer.sub.two"}


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same imports between a tree's packages (`trainer.data`, `ops.run`...); a
    module at the tree's top is a node of its own."""

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for module, edges in graph.items():
        packages.setdefault(package(module), set()).update(package(e) for e in edges)
    return {name: edges - {name} for name, edges in packages.items()}


def test_trainer_packages_import_each_other_one_way():
    assert cycles(package_graph(import_graph())) == []


@pytest.mark.parametrize("tree", ["ops", "stack", "box", "pulumi/infra"])
def test_the_other_trees_packages_import_each_other_one_way(tree):
    # ops.run and ops.data once imported each other, module by module without a loop.
    assert cycles(package_graph(import_graph(REPO / tree))) == []


def test_the_package_graph_sees_two_packages_that_import_each_other():
    graph = {"ops.run.launch": {"ops.data.transfer"}, "ops.data.prepare": {"ops.run.container"}}
    graph |= {"ops.data.transfer": set(), "ops.run.container": set()}
    assert cycles(package_graph(graph)) == [["ops.data", "ops.run"]]
