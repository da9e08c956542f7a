"""The cloud-init document both Pulumi programs boot a box with: the first-boot files only."""

import base64
import gzip
import json
import random
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from box import contract
from box.watchdog_config import GUARD_SETTINGS, WatchdogConfig
from stack import box_packing
from stack.cloud_init import (
    BOOTSTRAP_PATH,
    SOURCE_PATH,
    USER_DATA_BUDGET_BYTES,
    ProgramsSource,
    box_guard_settings,
    box_storage_settings,
    encode_user_data,
    render_cloud_init,
)
from tests.paths import BOX_DIR

AWS_USER_DATA_LIMIT_BYTES = 16 * 1024  # raw, before base64
AZURE_CUSTOM_DATA_LIMIT_BYTES = 64 * 1024
SHA = "ab" * 32


def _source(cloud="aws", **overrides) -> ProgramsSource:
    fields = {
        "cloud": cloud,
        "ssh_user": "ubuntu",
        "storage": "s3://glucose-storage-4d1f" if cloud == "aws" else "az://glucosedata1/training",
        "key": f"box/programs-{SHA}.tar",
        "sha256": SHA,
        "region": "eu-west-1",
    } | overrides
    return ProgramsSource(**fields)


def _render(cloud="aws", ssh_user="ubuntu", **guard):
    settings = box_packing.settings_text(cloud, **({"idle_shutdown_minutes": 30} | guard))
    return render_cloud_init(_source(cloud, ssh_user=ssh_user), settings)


def _files(document: str) -> dict:
    return {entry["path"]: entry for entry in yaml.safe_load(document)["write_files"]}


@pytest.mark.parametrize("cloud", ["aws", "azure"])
def test_document_is_cloud_config_yaml(cloud):
    document = _render(cloud)
    assert document.startswith("#cloud-config\n")
    assert set(yaml.safe_load(document)) == {"write_files", "runcmd"}


def test_the_document_writes_the_first_boot_files_and_no_program_else():
    files = _files(_render())
    assert set(files) == {
        contract.WATCHDOG_CONFIG_PATH,
        SOURCE_PATH,
        BOOTSTRAP_PATH,
        f"{contract.UNIT_DIR}/glucose-bootstrap.service",
    }
    assert files[BOOTSTRAP_PATH]["content"] == (BOX_DIR / "bootstrap.py").read_text()
    assert files[BOOTSTRAP_PATH]["permissions"] == "0755"


def test_the_boxes_settings_are_written_for_root_alone():
    # They may hold the webhook URL, a secret.
    settings = _files(_render())[contract.WATCHDOG_CONFIG_PATH]
    assert (settings["permissions"], settings["owner"]) == ("0600", "root:root")


def test_box_source_says_where_the_programs_are_and_what_they_must_hash_to():
    source = json.loads(_files(_render("azure", ssh_user="azureuser"))[SOURCE_PATH]["content"])
    assert source == {
        "cloud": "azure",
        "ssh_user": "azureuser",
        "storage": "az://glucosedata1/training",
        "key": f"box/programs-{SHA}.tar",
        "sha256": SHA,
        "region": "eu-west-1",
        "box_root": contract.BOX_ROOT,
    }


def test_runcmd_enables_the_bootstrap_for_later_boots_and_runs_it_now():
    runcmd = yaml.safe_load(_render())["runcmd"]
    assert runcmd == [
        ["systemctl", "enable", "glucose-bootstrap.service"],
        ["/usr/bin/python3", BOOTSTRAP_PATH],
    ]


def test_watchdog_config_holds_only_the_settings_that_differ_from_the_defaults():
    files = _files(_render("aws", idle_shutdown_minutes=45))
    config = json.loads(files[contract.WATCHDOG_CONFIG_PATH]["content"])
    assert config == {"cloud": "aws", "idle_shutdown_minutes": 45}


def test_a_config_of_another_box_root_reads_back_with_that_root_and_its_paths():
    config = WatchdogConfig("local", 30, box_root="/srv/lab/glucose", notify_webhook="https://h/x")
    assert WatchdogConfig.from_dict(json.loads(config.to_json())) == config


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
    config = json.loads(_files(document)[contract.WATCHDOG_CONFIG_PATH]["content"])
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
    peer_wait_minutes=45,
    auto_shutdown_time="21:00",
    auto_shutdown_time_zone="Asia/Tokyo",
)


def test_the_stack_configs_guard_settings_reach_the_box():
    document = _render("aws", **box_guard_settings(STACK_GUARD_CONFIG))
    box = json.loads(_files(document)[contract.WATCHDOG_CONFIG_PATH]["content"])
    assert (box["idle_shutdown_minutes"], box["hung_trainer_minutes"]) == (40, 90)
    assert box["peer_wait_minutes"] == 45
    assert (box["daily_stop_time"], box["daily_stop_time_zone"]) == ("21:00", "Asia/Tokyo")


@pytest.mark.parametrize(
    ("cloud", "uri", "expected"),
    [
        ("aws", "s3://glucose-storage-4d1f", {"storage_region": "eu-west-1"}),
        ("azure", "az://glucosedata1/training", {}),
    ],
)
def test_the_box_is_told_where_to_store_a_failed_runs_end(cloud, uri, expected):
    # The stack's storage (box/stored_end.py); on AWS the region its requests are signed for.
    storage = box_storage_settings(cloud, uri, "eu-west-1")
    settings = box_packing.settings_text(cloud, None, storage, idle_shutdown_minutes=30)
    box = json.loads(
        _files(render_cloud_init(_source(cloud), settings))[contract.WATCHDOG_CONFIG_PATH][
            "content"
        ]
    )
    assert {key: box[key] for key in box if key.startswith("storage_")} == {
        "storage_uri": uri,
        **expected,
    }


def test_storage_a_box_cannot_sign_for_is_refused_at_preview():
    with pytest.raises(ValueError, match="storage_region is empty"):
        box_packing.settings_text("aws", None, {"storage_uri": "s3://b"}, idle_shutdown_minutes=30)
    with pytest.raises(ValueError, match="storage_uri is 'gs://b'"):
        box_packing.settings_text("aws", None, {"storage_uri": "gs://b"}, idle_shutdown_minutes=30)


def test_each_guard_setting_is_exported_under_its_stack_config_key():
    # `fab box-update` reads them back from the stack's outputs by these names.
    from stack.config import FIELDS_BY_KEY

    settings = box_guard_settings(STACK_GUARD_CONFIG)
    assert set(settings) == {setting.box_key for setting in GUARD_SETTINGS}
    for setting in GUARD_SETTINGS:
        field = FIELDS_BY_KEY[setting.stack_key].name
        assert getattr(STACK_GUARD_CONFIG, field) == settings[setting.box_key], setting


def test_rendered_config_is_accepted_by_the_box_program(tmp_path):
    config = _files(_render("aws", idle_shutdown_minutes=5))[contract.WATCHDOG_CONFIG_PATH]
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
    settings = box_packing.settings_text("aws", idle_shutdown_minutes=30)
    with pytest.raises(ValueError, match=r"cloud is 'gcp'.*ssh_user is 'Root User'"):
        render_cloud_init(_source("gcp", ssh_user="Root User"), settings)


def test_bad_idle_minutes_fail_before_any_vm_boots():
    with pytest.raises(ValueError, match="idleShutdownMinutes: got 0, expected 5 to 1440"):
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


def test_the_largest_user_data_stays_in_its_budget_and_says_what_is_left():
    # The longest values a stack can give: a 63-character bucket, the longest zone.
    bucket = "s3://" + "b" * 63
    settings = box_packing.settings_text(
        "aws",
        None,
        box_storage_settings("aws", bucket, "ap-southeast-5"),
        idle_shutdown_minutes=1440,
        hung_trainer_minutes=1440,
        daily_stop_time="23:59",
        daily_stop_time_zone="America/Argentina/ComodRivadavia",
    )
    source = _source(storage=bucket, ssh_user="u" * 32, region="ap-southeast-5")
    packed = len(base64.b64decode(encode_user_data(render_cloud_init(source, settings))))
    left = USER_DATA_BUDGET_BYTES - packed
    print(f"user data: {packed} of {USER_DATA_BUDGET_BYTES} bytes gzipped, {left} left")
    assert left > 0, f"user data is {packed} bytes gzipped, over its budget"
    assert USER_DATA_BUDGET_BYTES <= AWS_USER_DATA_LIMIT_BYTES // 2


def test_user_data_over_its_budget_is_refused_at_preview():
    noise = base64.b64encode(random.Random(0).randbytes(12_000)).decode()
    with pytest.raises(ValueError, match="over its 8192-byte budget"):
        encode_user_data("#cloud-config\n# " + noise + "\n")


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
    assert len(units) == 6
