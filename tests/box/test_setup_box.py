"""setup-box.sh, the script cloud-init runs once: real bash, fake system tools.

The guard comes first, apt's lock and a late network are waited for, the GPU stack
and docker are kept from unattended upgrades, and a failure leaves a `failed`
marker with the log's tail instead of silence.
"""

import json
import shutil
import subprocess

import pytest

from tests.fakes.fake_box import FakeBox
from tests.fakes.system_tools import IMAGE_TOOLS, fake_system
from tests.fixtures.sshd import ensure_privilege_separation_dir
from tests.paths import BOX_DIR

GUARD_ON = "systemctl restart glucose-watchdog.timer"
GUARD_UNITS = [
    "systemctl daemon-reload",
    "systemctl enable glucose-watchdog.timer",
    GUARD_ON,
    "systemctl enable --now glucose-stop-record.service",
    "systemctl enable glucose-resume.service",
    "systemctl enable glucose-resume.timer",
    "systemctl restart glucose-resume.timer",
    "systemctl try-reload-or-restart ssh.service",
]
# A sleeping laptop's terminal must stop counting as a session within minutes, not the
# ~2 h TCP keep-alive takes (docs/guard-rails.md).
DEAD_CLIENT_LOGOUT_SECONDS = 5 * 60


def _run_setup(
    tmp_path,
    *,
    image_has=IMAGE_TOOLS,
    gpu=True,
    runtimes='{"nvidia":{}}',
    env=(),
    cloud="aws",
    mode=(),
):
    """Run setup-box.sh with only `image_has` of IMAGE_TOOLS on PATH; return (result, calls)."""
    system = fake_system(tmp_path, image_has=image_has, gpu=gpu, runtimes=runtimes)
    done = subprocess.run(
        ["bash", str(BOX_DIR / "setup-box.sh"), "ubuntu", str(tmp_path / "box"), cloud, *mode],
        env={**system.env, **dict(env)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, system.calls()


def _installs(calls):
    """`apt-get install` package lists, in order."""
    return [
        call.split(" --no-install-recommends ", 1)[1]
        for call in calls
        if call.startswith("apt-get ") and " install " in call
    ]


def test_setup_installs_nothing_on_an_image_that_has_it_all(tmp_path):
    done, calls = _run_setup(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _installs(calls) == []
    assert not any(call.startswith("nvidia-ctk") for call in calls)


def test_setup_installs_docker_only_when_absent(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=(), gpu=False, cloud="azure")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _installs(calls) == ["docker.io"]
    assert "systemctl enable --now docker" in calls


def test_apt_waits_for_the_lock_unattended_upgrades_holds(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=(), gpu=False, env={"FAKE_APT_BUSY": "3"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("retrying in 0s") == 3
    assert _installs(calls) == ["docker.io", "awscli"]
    assert all("-o DPkg::Lock::Timeout=600" in call for call in calls if call.startswith("apt"))


def test_downloads_wait_for_a_network_that_comes_late(tmp_path):
    # AWS attaches the Elastic IP after boot: the first requests go nowhere.
    done, calls = _run_setup(
        tmp_path, image_has=("docker", "nvidia-smi"), env={"FAKE_NETWORK_DOWN": "2"}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "retrying" in done.stdout
    assert _installs(calls) == ["nvidia-container-toolkit", "awscli"]


def test_setup_skips_gpu_software_without_a_gpu(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=("docker", "aws"), gpu=False)
    assert "no NVIDIA GPU" in done.stdout
    assert _installs(calls) == []


def test_setup_installs_driver_and_toolkit_on_a_bare_gpu_image(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=("docker", "aws"), runtimes='{"runc":{}}')
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ubuntu-drivers install --gpgpu nvidia:550-server" in calls
    assert _installs(calls)[-2:] == ["nvidia-utils-550-server", "nvidia-container-toolkit"]
    assert "nvidia-ctk runtime configure --runtime=docker" in calls
    assert calls.index("nvidia-ctk runtime configure --runtime=docker") < calls.index(
        "systemctl restart docker"
    )


def test_setup_adds_nvidia_repository_signed_by_its_key(tmp_path):
    _run_setup(tmp_path, image_has=("docker", "nvidia-smi"), runtimes='{"runc":{}}')
    sources = tmp_path / "apt/etc/apt/sources.list.d/nvidia-container-toolkit.list"
    keyring = tmp_path / "apt/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    assert sources.read_text().startswith(f"deb [signed-by={keyring}] https://nvidia.github.io/")


def test_unattended_upgrades_keep_off_the_gpu_stack_and_docker(tmp_path):
    _run_setup(tmp_path)
    hold = (tmp_path / "apt/etc/apt/apt.conf.d/51glucose-training-hold").read_text()
    assert "Unattended-Upgrade::Package-Blacklist {" in hold
    for pattern in ('"nvidia-";', '"libnvidia-";', '"cuda-";', '"docker";', '"containerd";'):
        assert pattern in hold


def test_setup_installs_the_aws_cli_where_an_aws_image_lacks_it(tmp_path):
    # Plain Ubuntu 22.04 (Volta boxes): without `aws` no verdict metric for the idle alarm.
    done, calls = _run_setup(tmp_path, image_has=("docker", "nvidia-smi", "nvidia-ctk"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _installs(calls) == ["awscli"]
    assert (tmp_path / "bin" / "aws").exists()


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


def test_the_guard_is_on_before_anything_can_fail(tmp_path):
    _, calls = _run_setup(tmp_path, image_has=())
    first_install = next(index for index, call in enumerate(calls) if call.startswith("apt-get"))
    assert [call for call in calls[:first_install] if call.startswith("systemctl")] == GUARD_UNITS


def test_guard_mode_turns_the_guard_on_and_does_nothing_else(tmp_path):
    # What `fab box-update` runs after writing new programs onto a running box.
    done, calls = _run_setup(tmp_path, image_has=(), mode=["guard"])
    assert done.returncode == 0, done.stdout + done.stderr
    box = tmp_path / "box"
    owned = f"{box}/runs {box}/datasets {box}/leases {box}/sweeps"
    assert calls == [f"chown ubuntu:ubuntu {owned}", *GUARD_UNITS]
    assert sorted(path.name for path in box.iterdir()) == [
        "datasets", "leases", "runs", "sweeps", "watchdog"
    ]  # fmt: skip


def test_guard_mode_starts_no_run_and_keeps_a_failed_marker(tmp_path):
    _run_setup(tmp_path, image_has=(), env={"FAKE_APT_FAIL": "1"})
    done, calls = _run_setup(tmp_path, image_has=(), mode=["guard"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [call for call in calls if "glucose-resume.service" in call and "enable" not in call]
    assert (tmp_path / "box" / "failed").read_text().startswith("setup failed at ")


def _sshd_settings(tmp_path, drop_in_dir):
    """The settings the real sshd takes from a config that includes `drop_in_dir` the
    way Ubuntu's /etc/ssh/sshd_config does (`sshd -T`: parse, print, exit)."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not shutil.which(sshd):
        pytest.skip("SKIPPED LOUDLY: OpenSSH `sshd` not installed; run tests/system-deps.sh")
    ensure_privilege_separation_dir()
    host_key = tmp_path / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key], check=True)
    config = tmp_path / "sshd_config"
    config.write_text(f"Include {drop_in_dir}/*.conf\nHostKey {host_key}\n")
    done = subprocess.run(
        [sshd, "-T", "-f", config], capture_output=True, text=True, timeout=30, check=True
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)


@pytest.mark.e2e
def test_sshd_logs_out_a_client_that_stopped_answering_within_minutes(tmp_path):
    done, calls = _run_setup(tmp_path, mode=["guard"])
    assert done.returncode == 0, done.stdout + done.stderr
    settings = _sshd_settings(tmp_path, tmp_path / "fs/etc/ssh/sshd_config.d")
    interval, count = int(settings["clientaliveinterval"]), int(settings["clientalivecountmax"])
    # sshd probes after `interval` of silence and gives up when `count` probes went unanswered.
    assert 0 < interval * (count + 1) <= DEAD_CLIENT_LOGOUT_SECONDS
    assert "systemctl try-reload-or-restart ssh.service" in calls


def test_setup_refuses_an_unknown_mode(tmp_path):
    done, calls = _run_setup(tmp_path, mode=["everything"])
    assert done.returncode == 2
    assert "mode is 'everything', expected guard or nothing" in done.stderr
    assert calls == []


def test_setup_lets_the_ssh_user_run_docker_and_write_runs_and_leases(tmp_path):
    _, calls = _run_setup(tmp_path)
    box = tmp_path / "box"
    assert "usermod -aG docker ubuntu" in calls
    assert f"chown ubuntu:ubuntu {box}/runs {box}/datasets {box}/leases {box}/sweeps" in calls


def test_setup_writes_the_ready_marker_last(tmp_path):
    done, _ = _run_setup(tmp_path)
    ready = json.loads((tmp_path / "box" / "ready").read_text())
    assert ready["gpu"] == "nvidia"
    assert done.stdout.strip().endswith(f"box ready: {tmp_path / 'box' / 'ready'}")
    assert not (tmp_path / "box" / "failed").exists()


def test_failed_setup_leaves_a_failed_marker_with_the_log_tail(tmp_path):
    done, calls = _run_setup(tmp_path, image_has=(), env={"FAKE_APT_FAIL": "1"})
    assert done.returncode != 0
    assert not (tmp_path / "box" / "ready").exists()
    failed = (tmp_path / "box" / "failed").read_text()
    assert failed.startswith("setup failed at ")
    assert "E: Unable to locate package" in failed
    assert GUARD_ON in calls


def test_a_driver_that_needs_a_reboot_says_so_in_the_failed_marker(tmp_path):
    env = {"FAKE_DRIVER_NEEDS_REBOOT": "1"}
    done, _ = _run_setup(tmp_path, image_has=("docker", "aws"), env=env)
    assert done.returncode != 0
    assert "reboot the box" in (tmp_path / "box" / "failed").read_text()


def test_gpu_without_a_recommended_driver_fails_setup_loudly(tmp_path):
    done, _ = _run_setup(tmp_path, image_has=("docker",), env={"FAKE_NO_DRIVER": "1"})
    assert done.returncode != 0
    assert "ERROR: ubuntu-drivers recommends no NVIDIA server driver" in done.stdout
    assert not (tmp_path / "box" / "ready").exists()


def test_running_setup_again_after_a_fix_clears_the_failed_marker(tmp_path):
    _run_setup(tmp_path, image_has=(), env={"FAKE_APT_FAIL": "1"})
    done, _ = _run_setup(tmp_path, image_has=())
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "box" / "failed").exists()
    assert (tmp_path / "box" / "ready").exists()


def test_a_box_whose_setup_failed_still_stops_when_idle(tmp_path):
    # The guard is on; docker, nvidia-smi and the aws CLI never came: idle, then stop.
    _run_setup(tmp_path / "setup", image_has=(), env={"FAKE_APT_FAIL": "1"})
    box = FakeBox(tmp_path / "box", idle_shutdown_minutes=3)
    box.set_docker_up(False)
    box.set_gpu(None)
    assert box.ticks_until_stop(1_800_000_000.0, minutes=3 + 2) is not None
