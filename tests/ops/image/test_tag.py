"""The image tag names exactly one state of the image's inputs."""

import subprocess

import pytest

from ops.image.build import IMAGE_INPUTS, image_tag, warn_if_unpinned
from tests.paths import REPO


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "train.py").write_text("print('v1')\n")
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "README.md").write_text("docs\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def _revision(repo):
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_clean_tree_is_tagged_with_the_revision(repo):
    assert image_tag(repo) == _revision(repo)


def test_changes_outside_the_image_inputs_keep_the_tag_clean(repo):
    (repo / "README.md").write_text("more docs\n")
    (repo / "notes.txt").write_text("untracked\n")
    assert image_tag(repo) == _revision(repo)


def test_changed_code_gets_a_dirty_tag_that_follows_the_content(repo):
    (repo / "trainer" / "train.py").write_text("print('v2')\n")
    first = image_tag(repo)
    assert first.startswith(f"{_revision(repo)}-dirty-")
    assert image_tag(repo) == first  # same content, same tag
    (repo / "trainer" / "train.py").write_text("print('v3')\n")
    assert image_tag(repo) != first


def test_untracked_code_counts_as_a_change(repo):
    (repo / "trainer" / "new.py").write_text("x = 1\n")
    first = image_tag(repo)
    assert "-dirty-" in first
    (repo / "trainer" / "new.py").write_text("x = 2\n")
    assert image_tag(repo) != first


def test_base_image_without_digest_draws_a_warning(capsys):
    warn_if_unpinned("pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime")
    assert "not pinned" in capsys.readouterr().err
    warn_if_unpinned("pytorch/pytorch@sha256:" + "0" * 64)
    assert capsys.readouterr().err == ""


def test_everything_the_build_context_lets_in_is_an_input_of_the_tag():
    """.dockerignore is an allow-list: a path it lets in that the tag does not hash would
    change the image under an unchanged tag."""
    allowed = [
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    assert allowed and all(
        any(path == given or path.startswith(given + "/") for given in IMAGE_INPUTS)
        for path in allowed
    ), allowed
    assert {"box/__init__.py", "box/contract.py"} <= set(allowed)
