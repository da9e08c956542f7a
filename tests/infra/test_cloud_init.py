"""The cloud-init document both Pulumi programs boot the box with."""

import base64
import gzip
import json
import shutil
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
        [
            "bash",
            "/opt/glucose-training/setup-box.sh",
            "azureuser",
            "/var/lib/glucose-training",
            "aws",
        ]
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


# --- setup-box.sh, the script cloud-init runs: real bash, fake system tools ---

REAL_TOOLS = ("bash", "grep", "sort", "tail", "sed", "mkdir", "date", "mv", "cat", "ln")
FAKE_SYSTEM_TOOL = """#!/bin/bash
echo "${0##*/} $*" >> "$FAKE_LOG"
case "${0##*/} $1" in
    "apt-get install")
        [ -z "${FAKE_APT_FAIL:-}" ] || exit 100
        # An installed package brings its command, as the real one would.
        for package in "$@"; do
            case "$package" in
                docker.io) ln -s "$FAKE_TOOL" "${0%/*}/docker" ;;
                nvidia-utils-*) ln -s "$FAKE_TOOL" "${0%/*}/nvidia-smi" ;;
                nvidia-container-toolkit) ln -s "$FAKE_TOOL" "${0%/*}/nvidia-ctk" ;;
                awscli) ln -s "$FAKE_TOOL" "${0%/*}/aws" ;;
            esac
        done ;;
    "docker info") echo "$FAKE_DOCKER_RUNTIMES" ;;
    "gpg --batch") cat > /dev/null ;;
    "ubuntu-drivers list")
        [ -z "${FAKE_NO_DRIVER:-}" ] || exit 0
        echo "nvidia-driver-535-server, (kernel modules provided by linux-modules-nvidia-535)"
        echo "nvidia-driver-550-server, (kernel modules provided by linux-modules-nvidia-550)" ;;
    "curl -fsSL")
        case "$2" in
            *.list) echo 'deb https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /' ;;
            *) echo KEY ;;
        esac ;;
esac
exit 0
"""
ALWAYS_FAKE = ("apt-get", "systemctl", "ubuntu-drivers", "modprobe", "curl", "gpg", "chown")
IMAGE_TOOLS = ("docker", "nvidia-smi", "nvidia-ctk", "aws")  # the AWS DLAMI has all four


def _run_setup(
    tmp_path, *, image_has=IMAGE_TOOLS, gpu=True, runtimes='{"nvidia":{}}', env=(), cloud="aws"
):
    """Run setup-box.sh with only `image_has` of IMAGE_TOOLS on PATH; return (rc, calls)."""
    bin_dir, pci, apt_root = tmp_path / "bin", tmp_path / "pci", tmp_path / "apt"
    for directory in (bin_dir, pci / "0000:00:1e.0", apt_root / "etc/apt/sources.list.d"):
        directory.mkdir(parents=True)
    (pci / "0000:00:1e.0" / "vendor").write_text("0x10de\n" if gpu else "0x1d0f\n")
    for tool in REAL_TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    fake = tmp_path / "fake-system-tool"
    fake.write_text(FAKE_SYSTEM_TOOL)
    fake.chmod(0o755)
    for tool in (*ALWAYS_FAKE, "usermod", *image_has):
        (bin_dir / tool).symlink_to(fake)
    log = tmp_path / "calls.log"
    log.touch()
    done = subprocess.run(
        ["bash", str(BOX_DIR / "setup-box.sh"), "ubuntu", str(tmp_path / "box"), cloud],
        env={
            "PATH": str(bin_dir),
            "FAKE_LOG": str(log),
            "FAKE_TOOL": str(fake),
            "FAKE_DOCKER_RUNTIMES": runtimes,
            "GLUCOSE_PCI_ROOT": str(pci),
            "GLUCOSE_APT_ROOT": str(apt_root),
            **dict(env),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, log.read_text().splitlines()


def _installs(calls):
    return [call for call in calls if call.startswith("apt-get install")]


def test_setup_installs_nothing_on_an_image_that_has_it_all(tmp_path):
    done, calls = _run_setup(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _installs(calls) == []
    assert not any(call.startswith("nvidia-ctk") for call in calls)


def test_setup_installs_docker_only_when_absent(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=(), gpu=False, cloud="azure")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _installs(calls) == [
        "apt-get install -y -q --no-install-recommends docker.io",
    ]
    assert "systemctl enable --now docker" in calls


def test_setup_skips_gpu_software_without_a_gpu(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=("docker", "aws"), gpu=False)
    assert "no NVIDIA GPU" in done.stdout
    assert _installs(calls) == []


def test_setup_installs_driver_and_toolkit_on_a_bare_gpu_image(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=("docker", "aws"), runtimes='{"runc":{}}')
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ubuntu-drivers install --gpgpu nvidia:550-server" in calls
    assert _installs(calls)[-2:] == [
        "apt-get install -y -q --no-install-recommends nvidia-utils-550-server",
        "apt-get install -y -q --no-install-recommends nvidia-container-toolkit",
    ]
    assert "nvidia-ctk runtime configure --runtime=docker" in calls
    assert calls.index("nvidia-ctk runtime configure --runtime=docker") < calls.index(
        "systemctl restart docker"
    )


def test_setup_adds_nvidia_repository_signed_by_its_key(tmp_path):
    _run_setup(tmp_path, image_has=("docker", "nvidia-smi"), runtimes='{"runc":{}}')
    sources = tmp_path / "apt/etc/apt/sources.list.d/nvidia-container-toolkit.list"
    keyring = tmp_path / "apt/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    assert sources.read_text().startswith(f"deb [signed-by={keyring}] https://nvidia.github.io/")


def test_setup_installs_the_aws_cli_where_an_aws_image_lacks_it(tmp_path):
    # Plain Ubuntu 22.04 (Volta boxes): without `aws` no GPU metric, no idle alarm.
    done, calls = _run_setup(tmp_path, image_has=("docker", "nvidia-smi", "nvidia-ctk"))
    assert done.returncode == 0, done.stdout + done.stderr
    install = "apt-get install -y -q --no-install-recommends awscli"
    assert _installs(calls) == [install]
    assert (tmp_path / "bin" / "aws").exists()
    # Before the watchdog's first run, so its first metric is published.
    assert calls.index(install) < calls.index("systemctl enable --now glucose-watchdog.timer")


def test_setup_installs_no_aws_cli_on_azure(tmp_path):
    done, calls = _run_setup(
        tmp_path, image_has=("docker", "nvidia-smi", "nvidia-ctk"), cloud="azure"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _installs(calls) == []


def test_setup_refuses_an_unknown_cloud_before_installing_anything(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=(), cloud="gcp")
    assert done.returncode == 2
    assert "cloud is 'gcp', expected aws or azure" in done.stderr
    assert calls == []


def test_setup_registers_an_existing_toolkit_with_docker_once(tmp_path):
    _, calls = _run_setup(tmp_path, runtimes='{"runc":{}}')
    assert _installs(calls) == []
    assert calls.count("nvidia-ctk runtime configure --runtime=docker") == 1


def test_setup_enables_watchdog_timer_and_resume_unit(tmp_path):
    _, calls = _run_setup(tmp_path)
    assert "systemctl enable --now glucose-watchdog.timer" in calls
    assert "systemctl enable glucose-resume.service" in calls


def test_setup_lets_the_ssh_user_run_docker_and_write_runs(tmp_path):
    _, calls = _run_setup(tmp_path)
    box = tmp_path / "box"
    assert "usermod -aG docker ubuntu" in calls
    assert f"chown ubuntu:ubuntu {box}/runs {box}/datasets" in calls


def test_setup_writes_the_ready_marker_last(tmp_path):
    done, _ = _run_setup(tmp_path)
    ready = json.loads((tmp_path / "box" / "ready").read_text())
    assert ready["gpu"] == "nvidia"
    assert done.stdout.strip().endswith(f"box ready: {tmp_path / 'box' / 'ready'}")


def test_failed_setup_writes_no_ready_marker(tmp_path):
    done, _ = _run_setup(tmp_path, image_has=(), env={"FAKE_APT_FAIL": "1"})
    assert done.returncode != 0
    assert not (tmp_path / "box" / "ready").exists()


def test_gpu_without_a_recommended_driver_fails_setup_loudly(tmp_path):
    done, _ = _run_setup(tmp_path, image_has=("docker",), env={"FAKE_NO_DRIVER": "1"})
    assert done.returncode != 0
    assert "ERROR: ubuntu-drivers recommends no NVIDIA server driver" in done.stdout
    assert not (tmp_path / "box" / "ready").exists()


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
    assert len(units) == 3
