"""Arrows between the trees run one way: ARCHITECTURE.md's "may import" table, enforced.

The table is read from ARCHITECTURE.md, not copied here. Every import statement counts,
wherever it stands (top, function, `TYPE_CHECKING`), and so does every other way to
load code: `importlib.import_module`, `__import__`, `runpy`, a spec from a file path,
or a change to `sys.path`. None of those is allowed in a tree at all: an import-graph
tool cannot see them.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.paths import REPO

TABLE_ROW = re.compile(r"^\| `(\w+)/` \| ([^|]*) \| ([^|]*) \|$", re.M)
OURS = ("trainer", "box", "stack", "ops", "infra", "policies")
HIDDEN_LOADS = {
    ("importlib", "import_module"),
    ("importlib.util", "spec_from_file_location"),
    ("importlib.util", "module_from_spec"),
    ("runpy", "run_path"),
    ("runpy", "run_module"),
}


@dataclass(frozen=True)
class Tree:
    name: str
    allowed: tuple[str, ...]
    """First-party modules this tree may import (a name covers its submodules)."""
    runs: str = ""
    """Where its code runs, as the table says."""

    def files(self, repo: Path) -> list[Path]:
        files = sorted((repo / self.name).rglob("*.py"))
        fabfile = repo / "fabfile.py"  # hands ops' tasks to `fab`: part of ops/
        return files + ([fabfile] if self.name == "ops" and fabfile.exists() else [])

    def owns(self, module: str) -> bool:
        top = module.split(".")[0]
        if self.name == "pulumi":
            return top in ("infra", "policies")
        return top == self.name


def trees(architecture: str) -> dict[str, Tree]:
    """The table "Where code runs": each tree and the first-party names it may import."""
    found = {}
    for name, runs, may_import in TABLE_ROW.findall(architecture):
        names = re.findall(r"`([\w.]+)`", may_import)
        found[name] = Tree(name, tuple(n for n in names if n.split(".")[0] in OURS), runs)
    return found


def module_name(path: Path, repo: Path, tree: Tree) -> str:
    # pulumi/ is run from pulumi/: its modules are `infra.*` and `policies`.
    root = repo / "pulumi" if tree.name == "pulumi" else repo
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, here: str) -> list[tuple[int, str]]:
    """(line, module) of every import in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: -node.level]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base]
        else:
            continue
        found += [(node.lineno, name) for name in names]
    return found


def hidden_loads(path: Path) -> list[tuple[int, str]]:
    """(line, what) of every load an import graph cannot see."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if called == "__import__" or any(
                called.endswith(f"{module.split('.')[-1]}.{name}") or called == name
                for module, name in HIDDEN_LOADS
            ):
                found.append((node.lineno, called))
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path":
            found.append((node.lineno, "sys.path"))
        if isinstance(node, ast.ImportFrom) and node.module in ("runpy", "importlib.util"):
            found.append((node.lineno, f"from {node.module} import ..."))
    return found


def violations(repo: Path, architecture: str) -> list[str]:
    known = trees(architecture)
    problems = []
    for tree in known.values():
        for path in tree.files(repo):
            here = module_name(path, repo, tree)
            where = path.relative_to(repo)
            # `import contract` beside box/contract.py loads only where box/ is on sys.path,
            # and hides the arrow: a sibling is imported by its package's name.
            siblings = {p.stem for p in path.parent.glob("*.py")} - {path.stem, "__init__", *OURS}
            for line, module in imports_of(path, here):
                if tree.owns(module):
                    continue
                if module.split(".")[0] in siblings:
                    problems.append(f"{where}:{line}: {module} is imported by a bare name")
                    continue
                if module.split(".")[0] not in OURS:
                    continue
                if not any(module == a or module.startswith(a + ".") for a in tree.allowed):
                    problems.append(f"{where}:{line}: {tree.name}/ imports {module}")
            for line, what in hidden_loads(path):
                problems.append(f"{where}:{line}: {what} loads code out of sight")
    return problems


def arrows(repo: Path, known: dict[str, Tree]) -> set[tuple[str, str]]:
    """(importer, imported) for each tree that imports from another: what
    docs/img/trees.svg draws (`tests/tree_picture.py`)."""
    found = set()
    for tree in known.values():
        for path in tree.files(repo):
            for _line, module in imports_of(path, module_name(path, repo, tree)):
                owner = next((t.name for t in known.values() if t.owns(module)), tree.name)
                if owner != tree.name:
                    found.add((tree.name, owner))
    return found


def test_every_import_follows_the_architecture_table():
    assert violations(REPO, (REPO / "ARCHITECTURE.md").read_text()) == []


def test_the_table_names_every_tree_and_what_crosses_between_trainer_box_and_ops():
    known = trees((REPO / "ARCHITECTURE.md").read_text())
    assert set(known) == {"trainer", "box", "stack", "pulumi", "ops"}
    # The image ships box/contract.py beside trainer/: of box, the trainer sees it alone.
    assert known["trainer"].allowed == ("box.contract",) and known["box"].allowed == ()
    assert "ops" not in {a.split(".")[0] for tree in known.values() for a in tree.allowed}


def test_the_trainer_modules_ops_may_import_load_without_torch():
    allowed = [a for a in trees((REPO / "ARCHITECTURE.md").read_text())["ops"].allowed]
    modules = [a for a in allowed if a.startswith("trainer.")]
    probe = f"import sys, {', '.join(modules)}; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False", modules


# The checker itself, on planted trees: it must see what it is there to see.
PLANTED_TABLE = """
| tree | runs | may import |
|---|---|---|
| `trainer/` | image | of ours only `box.contract` |
| `box/` | VM | nothing of ours |
| `stack/` | both | `box` |
| `pulumi/` | up | `stack`, `box` |
| `ops/` | laptop | `stack`, `box`, `trainer.storage` |
"""


def _plant(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for tree in ("trainer", "box", "stack", "pulumi", "ops"):
        (tmp_path / tree).mkdir(exist_ok=True)
    return violations(tmp_path, PLANTED_TABLE)


def test_an_arrow_back_up_is_found_even_inside_a_function(tmp_path):
    found = _plant(tmp_path, {"stack/config.py": "def f():\n    from ops.target import x\n"})
    assert found == ["stack/config.py:2: stack/ imports ops.target"]


def test_a_hidden_load_is_found(tmp_path):
    found = _plant(
        tmp_path,
        {
            "ops/a.py": "import importlib\nimportlib.import_module('infra.config')\n",
            "ops/b.py": "import sys\nsys.path.append('pulumi')\n",
        },
    )
    assert found == [
        "ops/a.py:2: importlib.import_module loads code out of sight",
        "ops/b.py:2: sys.path loads code out of sight",
    ]


def test_a_trainer_module_not_in_the_table_is_refused_to_ops(tmp_path):
    found = _plant(tmp_path, {"ops/run.py": "from trainer.loop import train\n"})
    assert found == ["ops/run.py:1: ops/ imports trainer.loop"]


def test_a_bare_import_of_a_sibling_is_refused(tmp_path):
    found = _plant(
        tmp_path,
        {
            "box/contract.py": "X = 1\n",
            "box/watchdog.py": "from box import contract\nimport contract\nimport ops\n",
        },
    )
    assert found == [
        "box/watchdog.py:2: contract is imported by a bare name",
        "box/watchdog.py:3: box/ imports ops",
    ]


def test_the_trainer_may_import_the_box_contract_and_nothing_else_of_box(tmp_path):
    found = _plant(
        tmp_path,
        {
            "trainer/a.py": "from box.contract import STATUS_FILE\n",
            "trainer/b.py": "from box import watchdog\nimport box.notify\n",
        },
    )
    assert found == [
        "trainer/b.py:1: trainer/ imports box",
        "trainer/b.py:2: trainer/ imports box.notify",
    ]
