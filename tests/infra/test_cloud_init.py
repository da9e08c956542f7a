"""The cloud-init document both Pulumi programs boot the box with."""

import ast
import base64
import bz2
import gzip
import io
import json
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from box import cloud_init
from box.cloud_init import (
    CONFIG_PATH,
    GUARD_SETTING_OUTPUTS,
    PROGRAMS_ARCHIVE_PATH,
    VERSION_PATH,
    box_guard_settings,
    encode_user_data,
    installed_files,
    render_cloud_init,
)
from tests.infra.box_fakes import box_python
from tests.paths import BOX_DIR

AWS_USER_DATA_LIMIT_BYTES = 16 * 1024  # raw, before base64
AZURE_CUSTOM_DATA_LIMIT_BYTES = 64 * 1024


def _render(cloud="aws", **overrides):
    args = {"cloud": cloud, "idle_shutdown_minutes": 30, "ssh_user": "ubuntu"} | overrides
    return render_cloud_init(**args)


def _archive(document: str) -> bytes:
    (entry,) = [e for e in yaml.safe_load(document)["write_files"] if e.get("encoding")]
    assert (entry["path"], entry["encoding"]) == (PROGRAMS_ARCHIVE_PATH, "b64")
    return base64.b64decode(entry["content"])


def _files(document: str) -> dict:
    """Every file the document installs, {path: {"content", "permissions"}}: its plain
    entries, and what its programs archive holds."""
    files = {
        entry["path"]: entry
        for entry in yaml.safe_load(document)["write_files"]
        if not entry.get("encoding")
    }
    with tarfile.open(fileobj=io.BytesIO(bz2.decompress(_archive(document)))) as archive:
        for member in archive.getmembers():
            content = archive.extractfile(member).read().decode()
            permissions = f"{stat.S_IMODE(member.mode):04o}"
            files["/" + member.name] = {"content": content, "permissions": permissions}
    return files


@pytest.mark.parametrize("cloud", ["aws", "azure"])
def test_document_is_cloud_config_yaml(cloud):
    document = _render(cloud)
    assert document.startswith("#cloud-config\n")
    assert set(yaml.safe_load(document)) == {"write_files", "runcmd"}


def _installed(files: dict, source: Path) -> str:
    if source.suffix in (".service", ".timer"):
        return files[f"/etc/systemd/system/{source.name}"]["content"]
    return files[f"/opt/glucose-training/{source.name}"]["content"]


def _box_sources(*suffixes: str) -> list[Path]:
    return sorted(
        path
        for path in BOX_DIR.iterdir()
        if path.suffix in suffixes and path.name not in cloud_init.PACKER_FILES
    )


def _without_docstrings(tree: ast.AST) -> str:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [
                statement
                for statement in body
                if not (
                    isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                )
            ] or [ast.Pass()]
    return ast.dump(tree)


def test_every_box_program_is_installed_as_the_same_code():
    files = _files(_render())
    for source in _box_sources(".py"):
        installed = _installed(files, source)
        assert _without_docstrings(ast.parse(installed)) == _without_docstrings(
            ast.parse(source.read_text())
        ), source.name
        assert (
            f"box/{source.name}"
            in installed.splitlines()[1 if installed.startswith("#!") else 0]
        )


def test_every_script_and_unit_is_installed_less_its_comment_lines():
    files = _files(_render())
    for source in _box_sources(".sh", ".service", ".timer"):
        kept = [line for line in source.read_text().splitlines() if not line.startswith("#")]
        installed = [
            line for line in _installed(files, source).splitlines() if not line.startswith("#")
        ]
        assert [line for line in installed if line.strip()] == [
            line for line in kept if line.strip() and not line.lstrip().startswith("#")
        ], source.name


def test_installed_programs_keep_their_shebang_first():
    files = _files(_render())
    for source in _box_sources(".py", ".sh"):
        if source.read_text().startswith("#!"):
            first = _installed(files, source).splitlines()[0]
            assert first == source.read_text().splitlines()[0], source.name


def test_installed_programs_run_on_the_boxes_python_3_10(tmp_path):
    python = box_python()
    if python is None:
        pytest.skip("no python3.10 here to check the installed box programs")
    files = _files(_render())
    for source in _box_sources(".py"):
        (tmp_path / source.name).write_text(_installed(files, source))
    done = subprocess.run(
        [python, "-S", "-c", "import watchdog, resume, stop_records"],
        cwd=tmp_path,
        env={"PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_programs_are_executable_and_libraries_are_not():
    files = _files(_render())
    assert files["/opt/glucose-training/watchdog.py"]["permissions"] == "0755"
    assert files["/opt/glucose-training/resume.py"]["permissions"] == "0755"
    assert files["/opt/glucose-training/stop_records.py"]["permissions"] == "0755"
    assert files["/opt/glucose-training/setup-box.sh"]["permissions"] == "0755"
    assert files["/opt/glucose-training/idle_decision.py"]["permissions"] == "0644"


def test_runcmd_unpacks_the_programs_then_runs_the_setup_script_for_the_ssh_user():
    runcmd = yaml.safe_load(_render(ssh_user="azureuser"))["runcmd"]
    assert runcmd == [
        f"/usr/bin/python3 -m tarfile -e {PROGRAMS_ARCHIVE_PATH} / && rm {PROGRAMS_ARCHIVE_PATH}",
        [
            "bash",
            "/opt/glucose-training/setup-box.sh",
            "azureuser",
            "/var/lib/glucose-training",
            "aws",
        ],
    ]


def test_the_document_installs_exactly_the_files_box_update_writes():
    settings = {"idle_shutdown_minutes": 45, "daily_stop_time": "21:30"}
    files = _files(_render(**settings))
    expected = installed_files(cloud="aws", **settings)
    assert {path: (f["permissions"], f["content"]) for path, f in files.items()} == {
        path: (mode, content) for path, mode, content in expected
    }


@pytest.mark.parametrize("python", ["this", "box"])
def test_the_programs_unpack_with_the_boxes_own_python(tmp_path, python):
    interpreter = sys.executable if python == "this" else box_python()
    if interpreter is None:
        pytest.skip("no python3.10 here to unpack the archive as the box would")
    archive = tmp_path / "box-programs.tar.bz2"
    archive.write_bytes(_archive(_render()))
    root = tmp_path / "root"
    subprocess.run(
        [interpreter, "-m", "tarfile", "-e", str(archive), str(root)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    programs = [f for f in installed_files(cloud="aws", idle_shutdown_minutes=30)]
    programs = [f for f in programs if f[0] not in (CONFIG_PATH, VERSION_PATH)]
    unpacked = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    assert unpacked == sorted(path.lstrip("/") for path, _, _ in programs)
    for path, mode, content in programs:
        installed = root / path.lstrip("/")
        assert (installed.read_text(), stat.S_IMODE(installed.stat().st_mode)) == (
            content,
            int(mode, 8),
        ), path


def test_watchdog_config_holds_only_the_settings_that_differ_from_the_defaults():
    # Every byte counts in EC2's 16 KB; the box program supplies the rest.
    config = json.loads(_files(_render("aws", idle_shutdown_minutes=45))[CONFIG_PATH]["content"])
    assert config == {"cloud": "aws", "idle_shutdown_minutes": 45}


@pytest.mark.parametrize("cloud", ["aws", "azure"])
def test_cloud_init_accepts_the_document_against_its_schema(tmp_path, cloud):
    command = shutil.which("cloud-init")
    if command is None:
        pytest.skip("SKIPPED LOUDLY: cloud-init missing; run tests/system-deps.sh")
    document = tmp_path / "user-data.yaml"
    document.write_text(_render(cloud, daily_stop_time="23:00"))
    done = subprocess.run(
        [command, "schema", "--config-file", str(document)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Valid cloud-config" in done.stdout


def test_watchdog_config_matches_the_stack_settings():
    document = _render(
        "azure",
        idle_shutdown_minutes=45,
        hung_trainer_minutes=200,
        daily_stop_time="22:30",
        daily_stop_time_zone="Europe/Berlin",
    )
    config = json.loads(_files(document)["/etc/glucose-training/watchdog.json"]["content"])
    assert config["cloud"] == "azure"
    assert config["idle_shutdown_minutes"] == 45
    assert config["hung_trainer_minutes"] == 200
    assert (config["daily_stop_time"], config["daily_stop_time_zone"]) == ("22:30", "Europe/Berlin")
    # The box's own BOX_ROOT: its state paths are the programs' defaults, on /run.
    assert "state_path" not in config and "resume_state_path" not in config


# The guard settings of a stack config (the attributes stack.config.StackConfig has).
STACK_GUARD_CONFIG = SimpleNamespace(
    idle_shutdown_minutes=40,
    hung_trainer_minutes=90,
    auto_shutdown_time="21:00",
    auto_shutdown_time_zone="Asia/Tokyo",
)


def test_the_stack_configs_guard_settings_reach_the_box():
    settings = box_guard_settings(STACK_GUARD_CONFIG)
    document = render_cloud_init(cloud="aws", ssh_user="ubuntu", **settings)
    box = json.loads(_files(document)["/etc/glucose-training/watchdog.json"]["content"])
    assert (box["idle_shutdown_minutes"], box["hung_trainer_minutes"]) == (40, 90)
    assert (box["daily_stop_time"], box["daily_stop_time_zone"]) == ("21:00", "Asia/Tokyo")


def test_each_guard_setting_is_exported_under_its_stack_config_key():
    # `fab box-update` reads them back from the stack's outputs by these names.
    from stack.config import KEYS

    settings = box_guard_settings(STACK_GUARD_CONFIG)
    assert set(settings) == set(GUARD_SETTING_OUTPUTS)
    for setting, output in GUARD_SETTING_OUTPUTS.items():
        assert getattr(STACK_GUARD_CONFIG, KEYS[output]) == settings[setting], output


def test_rendered_config_is_accepted_by_the_box_program(tmp_path):
    config = _files(_render("aws", idle_shutdown_minutes=5))["/etc/glucose-training/watchdog.json"]
    path = tmp_path / "watchdog.json"
    path.write_text(config["content"])
    loads = (
        "import watchdog_config as w; c = w.load_config(); "
        "print(c.idle_shutdown_minutes, c.box_root, c.state_path)"
    )
    done = subprocess.run(
        [sys.executable, "-c", loads],
        cwd=BOX_DIR,
        env={"GLUCOSE_WATCHDOG_CONFIG": str(path), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [
        "5",
        "/var/lib/glucose-training",
        "/run/glucose-training/watchdog-state.json",
    ]


def test_bad_arguments_are_all_named_in_one_error():
    with pytest.raises(ValueError, match=r"cloud is 'gcp'.*ssh_user is 'Root User'"):
        _render("gcp", ssh_user="Root User")


def test_bad_idle_minutes_fail_before_any_vm_boots():
    with pytest.raises(ValueError, match="idle_shutdown_minutes is 0"):
        _render(idle_shutdown_minutes=0)


def test_encoded_user_data_fits_both_clouds_and_round_trips():
    document = _render("aws")
    encoded = encode_user_data(document)
    raw = base64.b64decode(encoded)
    assert len(raw) < AWS_USER_DATA_LIMIT_BYTES
    assert len(encoded) < AZURE_CUSTOM_DATA_LIMIT_BYTES
    assert gzip.decompress(raw).decode() == document


def test_encoded_user_data_is_stable_between_renders():
    # Changed user data replaces the VM, so two previews must agree byte for byte.
    assert encode_user_data(_render()) == encode_user_data(_render())


def test_systemd_accepts_the_units_without_a_complaint(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("SKIPPED LOUDLY: systemd-analyze missing; run tests/system-deps.sh")
    units = sorted(path for path in BOX_DIR.iterdir() if path.suffix in (".service", ".timer"))
    for unit in units:
        shutil.copy(unit, tmp_path / unit.name)
    done = subprocess.run(
        [analyze, "verify", *(str(tmp_path / unit.name) for unit in units)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # verify exits 0 even for unknown keys; what it says on stderr is the verdict.
    assert (done.returncode, done.stderr) == (0, "")
    assert len(units) == 5
