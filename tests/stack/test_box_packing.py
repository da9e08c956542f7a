"""The box programs' archive: every program as its source, the same bytes every time."""

import io
import stat
import subprocess
import sys
import tarfile

import pytest

from stack import box_packing
from tests.fakes.fake_box import box_python
from tests.paths import BOX_DIR


def _members() -> dict[str, tuple[bytes, int]]:
    programs = box_packing.build_programs()
    with tarfile.open(fileobj=io.BytesIO(programs.archive)) as tar:
        members = tar.getmembers()
        assert {member.name.split("/")[0] for member in members} == {box_packing.PACKAGE}
        return {
            member.name.split("/", 1)[1]: (
                tar.extractfile(member).read(),
                stat.S_IMODE(member.mode),
            )
            for member in members
        }


def test_the_archive_holds_the_box_package_but_the_first_boot_files():
    shipped = {
        path.name
        for path in BOX_DIR.iterdir()
        if path.suffix in (".py", ".sh", ".service", ".timer")
    }
    first_boot_only = set(box_packing.FIRST_BOOT_FILES) - set(box_packing.ALSO_IN_THE_ARCHIVE)
    assert set(_members()) == shipped - first_boot_only
    assert {"__init__.py", "watchdog.py", "install.py", "contract.py"} <= set(_members())


def test_every_box_file_is_in_the_archive_as_its_source():
    for name, (data, _mode) in _members().items():
        assert data == (BOX_DIR / name).read_bytes(), name


def test_programs_are_executable_and_libraries_are_not():
    modes = {name: mode for name, (_data, mode) in _members().items()}
    for program in ("watchdog.py", "resume.py", "stop_records.py", "install.py", "setup-box.sh"):
        assert modes[program] == 0o755, program
    assert modes["idle_decision.py"] == modes["contract.py"] == 0o644
    assert modes["glucose-watchdog.service"] == 0o644


def test_the_archive_is_the_same_bytes_every_time_and_its_name_is_their_sha256():
    first, second = box_packing.build_programs(), box_packing.build_programs()
    assert first.archive == second.archive
    assert first.sha256 == second.sha256
    with tarfile.open(fileobj=io.BytesIO(first.archive)) as tar:
        assert {(m.mtime, m.uname, m.uid) for m in tar.getmembers()} == {(0, "root", 0)}


def test_the_archive_is_text_the_providers_take_as_a_string():
    programs = box_packing.build_programs()
    assert programs.text.encode("ascii") == programs.archive


@pytest.mark.parametrize("python", ["this", "box"])
def test_the_programs_unpack_and_import_with_the_boxes_own_python(tmp_path, python):
    interpreter = sys.executable if python == "this" else box_python()
    if interpreter is None:
        pytest.skip("no python3.10 here to unpack the archive as the box would")
    archive = tmp_path / "programs.tar"
    archive.write_bytes(box_packing.build_programs().archive)
    unpacked = tmp_path / "release"
    subprocess.run(
        [interpreter, "-m", "tarfile", "-e", str(archive), str(unpacked)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    done = subprocess.run(
        [interpreter, "-S", "-c", "from box import watchdog, resume, stop_records, install"],
        cwd=unpacked,
        env={"PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in (unpacked / "box").iterdir()) == sorted(_members())


def test_a_bad_setting_fails_in_the_packer_not_on_the_box():
    with pytest.raises(ValueError, match="hungTrainerMinutes: got 0, expected 10 to 1440"):
        box_packing.settings_text("aws", idle_shutdown_minutes=30, hung_trainer_minutes=0)
