"""Where the trees are, for tests at any depth (no `parents[N]` to keep in step)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOX_DIR = REPO / "box"
PULUMI_DIR = REPO / "pulumi"
TESTS_DIR = REPO / "tests"
