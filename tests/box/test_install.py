"""install.py: a set of box programs and its settings go in as a whole, or nothing changes.

The real install.py from the real archive, as root would run it, under a root
directory of the test's ($GLUCOSE_BOX_FS_ROOT); the full disk is a real tmpfs.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from box import contract
from stack import box_packing
from tests.fakes.fake_box import python_3

PROGRAM_DIR = contract.PROGRAM_DIR.lstrip("/")


def _settings(idle_minutes: int = 30) -> str:
    return box_packing.settings_text("aws", idle_shutdown_minutes=idle_minutes)


def _archive(edit: dict[str, bytes] | None = None) -> bytes:
    """The real archive, with `edit`'s members replaced (a later or a broken build)."""
    original = io.BytesIO(box_packing.build_programs().archive)
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=original) as source,
        tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar,
    ):
        for member in source.getmembers():
            data = (edit or {}).get(member.name, source.extractfile(member).read())
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def install(
    root: Path, archive: bytes, settings: str, python: str = sys.executable
) -> subprocess.CompletedProcess:
    """Unpack the archive's installer (box.install and the contract it reads) beside the
    archive and run it with `python`, as the first boot and `fab box-update` do."""
    work = root.parent / f"work-{len(list(root.parent.glob('work-*')))}"
    work.mkdir()
    (work / "programs.tar").write_bytes(archive)
    (work / "watchdog.json").write_text(settings)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for name in box_packing.INSTALLER:
            (work / name).parent.mkdir(exist_ok=True)
            (work / name).write_bytes(tar.extractfile(name).read())
    return subprocess.run(
        [python, "-m", "box.install", str(work / "programs.tar"), str(work / "watchdog.json")],
        cwd=work,
        env={**os.environ, "GLUCOSE_BOX_FS_ROOT": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _current(root: Path) -> Path:
    return (root / PROGRAM_DIR / contract.CURRENT).resolve()


def _current_program(root: Path, name: str) -> bytes:
    return (_current(root) / box_packing.PACKAGE / name).read_bytes()


def _read(root: Path, path: str) -> str:
    return (root / path.lstrip("/")).read_text()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


def test_a_box_gets_the_programs_its_settings_and_its_version_record_as_one_set(root):
    archive = box_packing.build_programs().archive
    done = install(root, archive, _settings(45))
    assert done.returncode == 0, done.stderr
    assert (
        _current_program(root, "watchdog.py") == (box_packing.BOX_DIR / "watchdog.py").read_bytes()
    )
    assert json.loads(_read(root, contract.WATCHDOG_CONFIG_PATH))["idle_shutdown_minutes"] == 45
    version = json.loads(_read(root, contract.VERSION_PATH))
    assert version["programs"] == box_packing.build_programs().sha256
    # The fixed paths the units and `fab` read are links into the set.
    assert (root / contract.WATCHDOG_CONFIG_PATH.lstrip("/")).is_symlink()
    unit = root / contract.UNIT_DIR.lstrip("/") / "glucose-watchdog.service"
    assert unit.read_bytes() == (box_packing.BOX_DIR / "glucose-watchdog.service").read_bytes()


def test_new_settings_alone_make_a_new_set_and_keep_the_old_one(root):
    archive = box_packing.build_programs().archive
    assert install(root, archive, _settings(30)).returncode == 0
    first = _current(root)
    assert install(root, archive, _settings(60)).returncode == 0
    assert _current(root) != first and first.is_dir()
    assert json.loads(_read(root, contract.WATCHDOG_CONFIG_PATH))["idle_shutdown_minutes"] == 60


def test_only_the_current_and_the_previous_set_are_kept(root):
    for minutes in (30, 40, 50):
        assert (
            install(root, box_packing.build_programs().archive, _settings(minutes)).returncode == 0
        )
    releases = [
        p for p in (root / PROGRAM_DIR / "releases").iterdir() if not p.name.startswith(".")
    ]
    assert len(releases) == 2


def test_a_set_that_does_not_start_is_refused_and_the_box_keeps_its_own(root):
    assert install(root, box_packing.build_programs().archive, _settings()).returncode == 0
    before = _current(root)
    broken = _archive({"box/watchdog.py": b"import no_such_module_on_the_box\n"})
    done = install(root, broken, _settings())
    assert done.returncode == 1
    assert "do not start" in done.stderr and "no_such_module_on_the_box" in done.stderr
    assert _current(root) == before
    assert (
        _current_program(root, "watchdog.py") == (box_packing.BOX_DIR / "watchdog.py").read_bytes()
    )


def test_settings_the_new_programs_refuse_change_nothing(root):
    assert install(root, box_packing.build_programs().archive, _settings()).returncode == 0
    before = _current(root)
    done = install(root, box_packing.build_programs().archive, '{"cloud": "aws", "idle": 3}\n')
    assert done.returncode == 1 and "unknown keys" in done.stderr
    assert _current(root) == before


def test_a_nearly_full_disk_is_refused_before_anything_is_touched(root, tmpfs):
    archive = box_packing.build_programs().archive
    # Room for the archive and its installer beside it, far from what install.py asks.
    disk = tmpfs(f"{2 * len(archive) // 1024 + 64}k")
    (disk / "root").mkdir()
    box = disk / "root"
    done = install(box, archive, _settings())
    assert done.returncode == 1
    assert "KB free" in done.stderr and "nothing was changed" in done.stderr
    assert not (box / PROGRAM_DIR / contract.CURRENT).exists()
    assert not (box / PROGRAM_DIR / "releases").exists()


def test_a_box_set_up_before_releases_moves_to_them(root):
    # What an older box has: flat programs, a plain settings file.
    flat = root / PROGRAM_DIR
    flat.mkdir(parents=True)
    shutil.copy(box_packing.BOX_DIR / "watchdog.py", flat / "watchdog.py")
    settings = root / contract.WATCHDOG_CONFIG_PATH.lstrip("/")
    settings.parent.mkdir(parents=True)
    settings.write_text(_settings(20))
    assert install(root, box_packing.build_programs().archive, settings.read_text()).returncode == 0
    assert not (flat / "watchdog.py").exists()
    assert settings.is_symlink()
    assert json.loads(settings.read_text())["idle_shutdown_minutes"] == 20


def test_install_refuses_a_python_older_than_the_programs_need(root):
    # Python 3.8: the box programs once said they ran on it, and zoneinfo needs 3.9.
    python = python_3(8)
    if python is None:
        pytest.skip("no python3.8 here to be the too-old python3 of a box")
    done = install(root, _archive(), _settings(), python=python)
    assert done.returncode == 1
    assert "the box programs need 3.10 or later" in done.stderr
    assert not (root / PROGRAM_DIR).exists()
