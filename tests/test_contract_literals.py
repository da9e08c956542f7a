"""What a run dir holds, the states a run and a sweep's trial are in, and where a
container sees the box's folders are spelled once, in box/contract.py: a string in any
other module of the trees that spells one of them (a file name, `tb/`, `plots/`,
`/workspace`, a state word) fails here, naming where, so that a rename there cannot
miss a reader here.

Read from the modules' syntax trees (`ast`): documentation (a docstring, or any other
string that stands alone as a statement) and comments say what they like; code, its
messages included, names the contract's constant. The few strings that spell such a
word and mean something else (a cloud's power state) are listed with why.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from box import contract
from tests.paths import REPO

TREES = ("box", "ops", "trainer", "stack", "pulumi")
CONTRACT = Path("box/contract.py")
RUN_DIR_FILES = {
    contract.STATUS_FILE, contract.HEARTBEAT_FILE, contract.METRICS_FILE, contract.CONFIG_FILE,
    contract.SPLITS_FILE, contract.SUMMARY_FILE, contract.REPORT_FILE, contract.LAUNCH_FILE,
    contract.STOPPED_BY_USER, contract.RUN_LOG_FILE, contract.RUN_LOG_ROTATED,
    contract.LAST_CHECKPOINT, contract.BEST_CHECKPOINT,
}  # fmt: skip
RUN_DIR_FOLDERS = (contract.TB_DIR, contract.PLOTS_DIR, contract.CHECKPOINTS_DIR)
STATE_WORDS = {*contract.STATES, *contract.TRIAL_STATES}
WORD = re.compile(r"[A-Za-z0-9._-]+")
FOLDER = re.compile(rf"(^|/)({'|'.join(map(re.escape, RUN_DIR_FOLDERS))})(/|$)")
ELSEWHERE = Counter({
    # Each spelling of a contract word meaning something else, and how often it is there.
    ("box/bootstrap.py", "failed"): 1,  # FAILED_MARKER: the first boot imports nothing
    # (tests/box/test_contract.py proves its copy equal)
    ("ops/cloud/aws.py", "running"): 1,  # an EC2 instance's state
    ("ops/cloud/aws.py", "stopped"): 1,
    ("ops/cloud/power.py", "running"): 1,  # a box's power, as the clouds say it
    ("ops/cloud/power.py", "stopped"): 1,
    ("ops/leaks/aws.py", "running"): 1,  # an EC2 instance's state
    ("ops/preflight/aws.py", "running"): 1,
    ("ops/preflight/aws.py", "stopped"): 1,
    ("trainer/loop/train.py", "stopped"): 1,  # how an epoch's steps ended, not a run
})  # fmt: skip


def _documentation(tree: ast.AST) -> set[int]:
    """The strings that stand alone as statements: docstrings, and those under a name."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def spelled(source: str) -> list[tuple[int, str]]:
    """(line, string) of each string of code in `source` that spells a contract word."""
    tree = ast.parse(source)
    documentation = _documentation(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        text = node.value
        if id(node) in documentation:
            continue
        if (
            text in STATE_WORDS
            or FOLDER.search(text)
            or contract.WORKSPACE in text
            or any(word in RUN_DIR_FILES for word in WORD.findall(text))
        ):
            found.append((node.lineno, text))
    return sorted(found)


def _modules() -> list[Path]:
    found = [path for tree in TREES for path in (REPO / tree).rglob("*.py")]
    return sorted(path.relative_to(REPO) for path in found if path.relative_to(REPO) != CONTRACT)


def test_no_module_but_the_contract_spells_a_run_dirs_names_states_or_layout():
    counts, said = Counter(), []
    for path in _modules():
        for line, text in spelled((REPO / path).read_text()):
            counts[(str(path), text)] += 1
            said.append(f"{path}:{line}: {text[:80]!r}")
    beyond = [key for key, count in counts.items() if count > ELSEWHERE.get(key, 0)]
    assert not beyond, "spelled outside box/contract.py (use its constant):\n" + "\n".join(
        line for line in said if any(line.startswith(f"{path}:") for path, _ in beyond)
    )


def test_each_spelling_listed_as_meaning_something_else_is_still_there():
    counts = Counter()
    for path in _modules():
        counts.update((str(path), text) for _, text in spelled((REPO / path).read_text()))
    gone = {key: count for key, count in ELSEWHERE.items() if counts[key] < count}
    assert not gone, f"no longer spelled there: take them off ELSEWHERE: {gone}"


def test_every_kind_of_spelling_is_caught():
    source = '''
"""A docstring may say status.json, tb/ and /workspace."""
A = "status.json"
B = f"{root}/plots/x.png"
C = "finished"
D = "/workspace/runs"
E = "see train.log"
F = "pruned"
G = "a running box"  # a word in a sentence is a word
'''
    assert [line for line, _ in spelled(source)] == [3, 4, 5, 6, 7, 8]
