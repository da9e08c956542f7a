"""The picture of the trees (docs/img/trees.svg) is the one their imports draw."""

from __future__ import annotations

from pathlib import Path

from tests.paths import REPO
from tests.tree_picture import PICTURE, draw

ARCHITECTURE_TABLE = """
| tree | runs | may import |
|---|---|---|
| `trainer/` | inside the image (and locally) | `box.contract` |
| `box/` | on the VM: stdlib | nothing of ours |
| `stack/` | where `fab` runs | `box` |
| `pulumi/` | in `pulumi up` | `stack`, `box` |
| `ops/` | on the user's machine | `stack`, `box`, `trainer.storage` |
"""


def _plant(repo: Path, files: dict[str, str]) -> Path:
    (repo / "ARCHITECTURE.md").write_text(ARCHITECTURE_TABLE)
    for tree in ("trainer", "box", "stack", "pulumi", "ops"):
        (repo / tree).mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    return repo


def test_the_committed_picture_is_the_one_the_imports_draw():
    assert PICTURE.is_file(), "no docs/img/trees.svg: python -m tests.tree_picture draws it"
    assert PICTURE.read_text() == draw(REPO), (
        "docs/img/trees.svg is not what the code's imports draw: "
        "python -m tests.tree_picture redraws it"
    )


def test_the_picture_has_an_arrow_for_each_import_between_trees_and_no_other(tmp_path):
    repo = _plant(
        tmp_path,
        {
            "ops/tasks/run.py": "from stack import config\nfrom trainer.storage import x\n",
            "stack/config.py": "import box.contract\n",
            "trainer/storage/__init__.py": "import numpy\n",
        },
    )
    picture = draw(repo)
    arrows = {line.split("<title>")[1].split("</title>")[0] for line in picture.splitlines()
              if line.startswith("<path")}  # fmt: skip
    assert arrows == {"ops/ imports stack/", "ops/ imports trainer/", "stack/ imports box/"}


def test_each_tree_shows_where_it_runs_and_its_folders(tmp_path):
    repo = _plant(tmp_path, {"ops/tasks/run.py": "", "ops/plan/estimate.py": ""})
    picture = draw(repo)
    assert ">on the user's machine</text>" in picture
    assert ">on the VM</text>" in picture  # the table's aside, after a colon, left out
    assert ">inside the image</text>" in picture  # and after a parenthesis
    assert ">plan tasks</text>" in picture


def test_a_new_import_between_trees_changes_the_picture(tmp_path):
    repo = _plant(tmp_path, {"stack/config.py": ""})
    before = draw(repo)
    (repo / "stack" / "config.py").write_text("from box import contract\n")
    assert draw(repo) != before
