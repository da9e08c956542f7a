"""`fab box-update` against a real sshd: the box gets this checkout's programs and settings.

The box's file system is a temporary tree (`GLUCOSE_BOX_FS_ROOT`, handed to the SSH
session by sshd) and `systemctl` a recorder first on the session's PATH: no systemd
runs here. Everything else is real: Fabric, sshd, bash, base64, the archive's own
install.py as root, and the box's own setup-box.sh turning the guard on.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import os
import re
import shutil
import stat
import tarfile
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from box import contract
from ops.remote import update as box_update
from ops.remote.ssh import Box
from ops.target.resolve import load_target_file
from stack import box_packing
from tests.ops.conftest import LocalBox, assert_one_line_error, make_local_box

pytestmark = pytest.mark.e2e  # sshd


@pytest.fixture
def cloud_box(sshd_factory, tmp_path: Path) -> LocalBox:
    """An "AWS" box whose / is tmp_path/fs and whose systemctl writes a log."""
    fs = tmp_path / "fs"
    fs.mkdir()
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    systemctl = fakebin / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "systemctl.log"}\n')
    systemctl.chmod(0o755)
    path = f"{fakebin}:{os.environ['PATH']}"
    server = sshd_factory({"GLUCOSE_BOX_FS_ROOT": str(fs), "PATH": path})
    box = make_local_box(server, tmp_path / "box")
    box.write_target(cloud="aws", idleShutdownMinutes=45)
    box.fs = fs
    box.systemctl_log = tmp_path / "systemctl.log"
    return box


def _installed(box: LocalBox, path: str) -> Path:
    return box.fs / path.lstrip("/")


@pytest.fixture
def connect(monkeypatch):
    """A Box for a LocalBox, trusting hosts into that box's own known_hosts."""
    opened: list[Box] = []

    def open_box(box: LocalBox) -> Box:
        monkeypatch.setenv("GLUCOSE_KNOWN_HOSTS", str(box.known_hosts))
        opened.append(Box(load_target_file(box.target_file)))
        return opened[-1]

    yield open_box
    for box in opened:
        box.close()


def test_box_update_installs_the_programs_a_new_box_fetches_with_the_stacks_settings(cloud_box):
    result = cloud_box.fab("box-update")
    assert result.returncode == 0, result.stderr
    current = _installed(cloud_box, f"{contract.PROGRAM_DIR}/{contract.CURRENT}")
    with tarfile.open(fileobj=io.BytesIO(box_packing.build_programs().archive)) as archive:
        for member in archive.getmembers():
            installed = current / member.name
            assert installed.read_bytes() == archive.extractfile(member).read(), member.name
            assert stat.S_IMODE(installed.stat().st_mode) == member.mode, member.name
    unit = _installed(cloud_box, f"{contract.UNIT_DIR}/glucose-watchdog.service")
    assert unit.read_text() == (current / "box" / "glucose-watchdog.service").read_text()
    watchdog = json.loads(_installed(cloud_box, contract.WATCHDOG_CONFIG_PATH).read_text())
    assert (watchdog["cloud"], watchdog["idle_shutdown_minutes"]) == ("aws", 45)
    short = box_packing.build_programs().sha256[:12]
    assert f"box programs {short} installed (watchdog: idle_shutdown_minutes=45)" in result.stdout


def test_the_installed_settings_are_roots_alone(cloud_box):
    # They may hold the webhook URL, a secret.
    assert cloud_box.fab("box-update").returncode == 0
    settings = _installed(cloud_box, contract.WATCHDOG_CONFIG_PATH).stat()
    assert (stat.S_IMODE(settings.st_mode), settings.st_uid) == (0o600, 0)


def test_box_update_carries_no_setting_on_a_command_line(cloud_box):
    hook = "https://hooks.slack.com/services/T0/B0/secret-XYZ"
    cloud_box.write_target(cloud="aws", idleShutdownMinutes=45, notifyWebhook=hook)
    # gunzip, in the pipe that carries the script, writes down its shell's command line,
    # as `ps` shows it to any user of the box.
    seen = cloud_box.systemctl_log.with_name("command-lines.log")
    gunzip = cloud_box.systemctl_log.with_name("bin") / "gunzip"
    gunzip.write_text(
        f'#!/bin/sh\ntr "\\000" " " < /proc/$PPID/cmdline >> {seen}\necho >> {seen}\n'
        f'exec {shutil.which("gunzip")} "$@"\n'
    )
    gunzip.chmod(0o755)
    assert cloud_box.fab("box-update").returncode == 0
    assert _watchdog_json(cloud_box)["notify_webhook"] == hook
    command_lines = seen.read_text()
    assert "gunzip" in command_lines
    assert "secret-XYZ" not in _with_payloads_decoded(command_lines)


def _with_payloads_decoded(text: str) -> str:
    """`text` and every gzip+base64 payload in it, decoded: what anyone who reads it has."""
    decoded = [text]
    for payload in re.findall(r"[A-Za-z0-9+/=]{40,}", text):
        with contextlib.suppress(ValueError, OSError, EOFError):
            decoded.append(gzip.decompress(base64.b64decode(payload)).decode(errors="replace"))
    return "\n".join(decoded)


def test_box_update_on_a_nearly_full_disk_changes_nothing_and_says_why(cloud_box, tmpfs):
    # The box's /opt is a small file system of its own, as a full root disk would be.
    assert cloud_box.fab("box-update").returncode == 0
    before = _installed(cloud_box, f"{contract.PROGRAM_DIR}/{contract.CURRENT}").resolve()
    opt = _installed(cloud_box, contract.PROGRAM_DIR)
    moved = opt.with_name("glucose-training.full")
    opt.rename(moved)
    opt.symlink_to(tmpfs("300k"))
    for item in moved.iterdir():
        (opt / item.name).symlink_to(item)
    result = cloud_box.fab("box-update", "--idle-shutdown-minutes", "40")
    assert_one_line_error(result, "box-update failed", "KB free", "nothing was changed")
    assert (opt / contract.CURRENT).resolve().name == before.name
    assert _watchdog_json(cloud_box)["idle_shutdown_minutes"] == 45


def test_box_update_turns_the_guard_on_as_a_first_boot_does(cloud_box):
    # The stop recorder is started (shutdowns are recorded from now on); the resume
    # service is only enabled: it acts at boot and by its timer, never for box-update.
    assert cloud_box.fab("box-update").returncode == 0
    calls = cloud_box.systemctl_log.read_text().splitlines()
    assert calls == [
        "daemon-reload",
        "enable glucose-watchdog.timer",
        "restart glucose-watchdog.timer",
        "enable --now glucose-stop-record.service",
        "enable glucose-resume.service",
        "enable glucose-resume.timer",
        "restart glucose-resume.timer",
        "try-reload-or-restart ssh.service",
    ]


def test_an_older_box_gets_the_box_root_fab_writes_leases_into(cloud_box):
    assert cloud_box.fab("box-update").returncode == 0
    box_root = _installed(cloud_box, contract.BOX_ROOT)
    for name in ("runs", "datasets", "leases", "watchdog"):
        assert (box_root / name).is_dir(), name
    assert not (box_root / "ready").exists()  # the setup proper is not re-run


def test_an_updated_box_is_current_and_an_old_one_is_warned_about(cloud_box, connect):
    box = connect(cloud_box)
    assert "no box version record" in box_update.stale_warning(box)
    assert cloud_box.fab("box-update").returncode == 0
    assert box_update.stale_warning(box) is None
    version = _installed(cloud_box, contract.VERSION_PATH)
    version.unlink()
    version.write_text(json.dumps({"programs": "an-older-digest", "settings": "x"}))
    assert "runs older (or other) box programs" in box_update.stale_warning(box)


def _watchdog_json(box: LocalBox) -> dict:
    return json.loads(_installed(box, contract.WATCHDOG_CONFIG_PATH).read_text())


def _write_watchdog_json(box: LocalBox, **settings) -> None:
    path = _installed(box, contract.WATCHDOG_CONFIG_PATH)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cloud": "aws", **settings}))


GUARD_KEYS = ("idle_shutdown_minutes", "hung_trainer_minutes", "peer_wait_minutes")
DAILY_STOP_KEYS = ("daily_stop_time", "daily_stop_time_zone")


def test_every_guard_setting_comes_from_the_stack(cloud_box):
    cloud_box.write_target(
        cloud="aws",
        idleShutdownMinutes=40,
        hungTrainerMinutes=90,
        peerWaitMinutes=45,
        autoShutdownTime="21:30",
        autoShutdownTimeZone="Europe/Berlin",
    )
    _write_watchdog_json(
        cloud_box, idle_shutdown_minutes=15, hung_trainer_minutes=60, peer_wait_minutes=20
    )
    assert cloud_box.fab("box-update").returncode == 0
    watchdog = _watchdog_json(cloud_box)
    assert [watchdog[key] for key in GUARD_KEYS + DAILY_STOP_KEYS] == [
        40,
        90,
        45,
        "21:30",
        "Europe/Berlin",
    ]


def test_settings_the_stack_lacks_are_the_boxes_own(cloud_box):
    # A stack from before these outputs: the box keeps its hung limit and daily stop.
    cloud_box.write_target(cloud="aws", idleShutdownMinutes=45)
    _write_watchdog_json(
        cloud_box,
        idle_shutdown_minutes=90,
        hung_trainer_minutes=200,
        peer_wait_minutes=60,
        daily_stop_time="22:00",
        daily_stop_time_zone="Asia/Tokyo",
    )
    assert cloud_box.fab("box-update").returncode == 0
    watchdog = _watchdog_json(cloud_box)
    assert [watchdog[key] for key in GUARD_KEYS + DAILY_STOP_KEYS] == [
        45,
        200,
        60,
        "22:00",
        "Asia/Tokyo",
    ]


def test_where_run_ends_are_told_comes_from_the_stack_else_stays_the_boxes_own(cloud_box):
    topic = "arn:aws:sns:us-east-1:123456789012:glucose-run-ends"
    hook = "https://hooks.slack.com/services/T0/B0/x"
    cloud_box.write_target(cloud="aws", idleShutdownMinutes=45, notifyTopicArn=topic)
    _write_watchdog_json(cloud_box, idle_shutdown_minutes=45, notify_webhook=hook)
    assert cloud_box.fab("box-update").returncode == 0
    watchdog = _watchdog_json(cloud_box)
    assert (watchdog["notify_topic_arn"], watchdog["notify_webhook"]) == (topic, hook)


def test_the_stacks_first_choice_reaches_the_box_else_stays_the_boxes_own(cloud_box):
    # What a boot on a fallback size is told against (box/boot_record.py).
    tried = [{"size": "g6.xlarge", "zone": "us-east-1a", "market": "spot", "refusal": ""}]
    cloud_box.write_target(cloud="aws", idleShutdownMinutes=45, placementTried=tried)
    _write_watchdog_json(cloud_box, idle_shutdown_minutes=45, first_choice="g5.xlarge on-demand")
    assert cloud_box.fab("box-update").returncode == 0
    assert _watchdog_json(cloud_box)["first_choice"] == "g6.xlarge spot"
    cloud_box.write_target(cloud="aws", idleShutdownMinutes=45)
    assert cloud_box.fab("box-update").returncode == 0
    assert _watchdog_json(cloud_box)["first_choice"] == "g6.xlarge spot"  # the box's own


def test_the_stacks_storage_reaches_the_box_to_store_failed_runs_ends_in(cloud_box):
    # Where box/stored_end.py writes a run's end its trainer could not store.
    cloud_box.write_target(
        cloud="aws", idleShutdownMinutes=45, storageUri="s3://glucose-4d1f", region="eu-west-1"
    )
    assert cloud_box.fab("box-update").returncode == 0
    watchdog = _watchdog_json(cloud_box)
    assert (watchdog["storage_uri"], watchdog["storage_region"]) == (
        "s3://glucose-4d1f",
        "eu-west-1",
    )


def test_settings_nobody_has_take_cloud_inits_defaults(cloud_box, connect):
    box = connect(cloud_box)
    settings = box_update.settings_for(box.target, {"idleShutdownMinutes": "45"}, {}, box)
    assert settings.guard == {"idle_shutdown_minutes": 45}
    watchdog = json.loads(box_update.settings_text(settings))
    assert watchdog == {"cloud": "aws", "idle_shutdown_minutes": 45}  # the rest: defaults


def test_the_flag_overrides_the_stacks_idle_minutes(cloud_box):
    assert cloud_box.fab("box-update", "--idle-shutdown-minutes", "20").returncode == 0
    assert _watchdog_json(cloud_box)["idle_shutdown_minutes"] == 20


def test_an_idle_stop_the_stack_refuses_is_refused_in_one_line(cloud_box):
    assert_one_line_error(
        cloud_box.fab("box-update", "--idle-shutdown-minutes", "2"),
        "idleShutdownMinutes: got 2, expected 5 to 1440",
    )
    assert list(cloud_box.fs.iterdir()) == []


def test_on_aws_an_idle_stop_longer_than_the_stacks_alarm_is_refused(cloud_box):
    # The stack's CloudWatch alarm would stop the box after its 45 idle minutes anyway.
    assert_one_line_error(
        cloud_box.fab("box-update", "--idle-shutdown-minutes", "70"),
        "longer than the stack's idle alarm",
        "after 45 idle minutes",
    )


def test_without_idle_minutes_anywhere_the_flag_is_asked_for(cloud_box):
    cloud_box.write_target(cloud="aws")
    assert_one_line_error(
        cloud_box.fab("box-update"), "no idleShutdownMinutes", "--idle-shutdown-minutes N"
    )


def test_a_setting_that_does_not_fit_is_refused_in_one_line(cloud_box, connect):
    cloud_box.write_target(cloud="aws", idleShutdownMinutes="soon")
    assert_one_line_error(cloud_box.fab("box-update"), "idleShutdownMinutes is 'soon'")
    box = connect(cloud_box)
    odd = {"idleShutdownMinutes": 45, "autoShutdownTime": "7pm"}
    settings = box_update.settings_for(box.target, odd, {}, box)
    with pytest.raises(Exit, match="daily_stop_time is '7pm', expected HH:MM"):
        box_update.settings_text(settings)


def test_dry_run_says_what_each_box_would_get_and_changes_nothing(cloud_box):
    result = cloud_box.fab("box-update", "--dry-run")
    assert result.returncode == 0, result.stderr
    short = box_packing.build_programs().sha256[:12]
    assert f"would install box programs {short} with settings idle_shutdown_minutes=45" in (
        result.stdout
    )
    assert list(cloud_box.fs.iterdir()) == []
    assert not cloud_box.systemctl_log.exists()


def test_a_lab_box_is_refused_in_one_line(cloud_box):
    cloud_box.write_target(cloud="local")
    assert_one_line_error(cloud_box.fab("box-update"), "box-update is for boxes `pulumi up` made")


def test_lab_boxes_are_never_warned_about(local_box, connect):
    assert box_update.stale_warning(connect(local_box)) is None
