"""requirements/image.txt: the image's hash-locked runtime deps, in step with pyproject."""

import re

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.paths import REPO

LOCK = REPO / "requirements" / "image.txt"
LOCK_INPUT = REPO / "requirements" / "image.in"
# What the base image owns: the lock must never bring its own (CPU or CUDA) torch.
BASE_OWNED = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*)$")
# Held back on purpose in image.in beyond pyproject (see the comment there).
EXTRA_IN_IMAGE = {"protobuf"}


def _locked_entries() -> list[str]:
    """One string per locked requirement: its line plus its --hash continuation lines."""
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())
    return [line for line in text.splitlines() if line.strip() and not line.startswith(("#", " "))]


def _input_requirements() -> list[Requirement]:
    lines = LOCK_INPUT.read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def test_every_locked_package_is_pinned_with_hashes():
    entries = _locked_entries()
    assert entries
    for entry in entries:
        requirement = Requirement(entry.split(" --hash")[0])
        assert str(requirement.specifier).startswith("=="), entry
        assert "--hash=sha256:" in entry, entry


def test_lock_holds_no_torch_or_cuda_packages():
    names = {canonicalize_name(Requirement(e.split(" --hash")[0]).name) for e in _locked_entries()}
    assert not {name for name in names if BASE_OWNED.match(name)}


def test_image_deps_are_the_projects_runtime_deps_without_torch():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {canonicalize_name(Requirement(dep).name) for dep in project["dependencies"]}
    image = {canonicalize_name(req.name) for req in _input_requirements()}
    assert image == (wanted - {"torch"}) | EXTRA_IN_IMAGE


def test_locked_versions_satisfy_the_lock_input():
    locked: dict[str, list[str]] = {}
    for entry in _locked_entries():
        requirement = Requirement(entry.split(" --hash")[0])
        pinned = str(requirement.specifier).removeprefix("==")
        locked.setdefault(canonicalize_name(requirement.name), []).append(pinned)
    for wanted in _input_requirements():
        versions = locked[canonicalize_name(wanted.name)]
        assert all(wanted.specifier.contains(version) for version in versions), (wanted, versions)
