"""The cloud-init document both Pulumi programs boot the box with."""

import base64
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PULUMI_DIR = Path(__file__).resolve().parents[2] / "pulumi"
BOX_DIR = PULUMI_DIR / "infra" / "box"
sys.path.insert(0, str(PULUMI_DIR))

from infra.cloud_init import encode_user_data, render_cloud_init  # noqa: E402

AWS_USER_DATA_LIMIT_BYTES = 16 * 1024  # raw, before base64
AZURE_CUSTOM_DATA_LIMIT_BYTES = 64 * 1024


def _render(cloud="aws", **overrides):
    args = {"cloud": cloud, "idle_shutdown_minutes": 30, "ssh_user": "ubuntu"} | overrides
    return render_cloud_init(**args)


def _files(document: str) -> dict:
    return {entry["path"]: entry for entry in yaml.safe_load(document)["write_files"]}


@pytest.mark.parametrize("cloud", ["aws", "azure"])
def test_document_is_cloud_config_yaml(cloud):
    document = _render(cloud)
    assert document.startswith("#cloud-config\n")
    assert set(yaml.safe_load(document)) == {"write_files", "runcmd"}


def test_every_box_file_is_installed_verbatim():
    files = _files(_render())
    for source in BOX_DIR.iterdir():
        if source.suffix in (".service", ".timer"):
            installed = files[f"/etc/systemd/system/{source.name}"]
        elif source.suffix in (".py", ".sh"):
            installed = files[f"/opt/glucose-training/{source.name}"]
        else:
            continue
        assert installed["content"] == source.read_text(), source.name


def test_programs_are_executable_and_libraries_are_not():
    files = _files(_render())
    assert files["/opt/glucose-training/watchdog.py"]["permissions"] == "0755"
    assert files["/opt/glucose-training/resume.py"]["permissions"] == "0755"
    assert files["/opt/glucose-training/setup-box.sh"]["permissions"] == "0755"
    assert files["/opt/glucose-training/idle_decision.py"]["permissions"] == "0644"


def test_runcmd_runs_the_setup_script_for_the_ssh_user():
    runcmd = yaml.safe_load(_render(ssh_user="azureuser"))["runcmd"]
    assert runcmd == [
        ["bash", "/opt/glucose-training/setup-box.sh", "azureuser", "/var/lib/glucose-training"]
    ]


def test_watchdog_config_matches_the_stack_settings():
    document = _render("azure", idle_shutdown_minutes=45, hung_trainer_minutes=200)
    config = json.loads(_files(document)["/etc/glucose-training/watchdog.json"]["content"])
    assert config["cloud"] == "azure"
    assert config["idle_shutdown_minutes"] == 45
    assert config["hung_trainer_minutes"] == 200
    assert config["box_root"] == "/var/lib/glucose-training"


def test_rendered_config_is_accepted_by_the_box_program(tmp_path):
    config = _files(_render("aws", idle_shutdown_minutes=5))["/etc/glucose-training/watchdog.json"]
    path = tmp_path / "watchdog.json"
    path.write_text(config["content"])
    loads = "import watchdog_config as c; print(c.load_config().idle_shutdown_minutes)"
    done = subprocess.run(
        [sys.executable, "-c", loads],
        cwd=BOX_DIR,
        env={"GLUCOSE_WATCHDOG_CONFIG": str(path), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "5"


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
