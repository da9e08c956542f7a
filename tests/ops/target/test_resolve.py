"""Which box `fab` drives: target files and the Pulumi stack, with one-line errors."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from box import contract
from box.watchdog_config import GUARD_SETTINGS
from ops.target.resolve import load_target_file, resolve_target
from tests.ops.conftest import FAB, assert_one_line_error
from tests.paths import REPO


def _write(path: Path, outputs: dict) -> Path:
    path.write_text(json.dumps(outputs))
    return path


def test_target_file_keys_become_a_target(tmp_path):
    path = _write(
        tmp_path / "box.json",
        {
            "cloud": "aws",
            "hosts": ["10.0.0.5"],
            "sshUser": "ubuntu",
            "sshPort": 2222,
            "sshKeyPath": "keys/id",
            "storageUri": "s3://bucket/prefix/",
            "registry": "123.dkr.ecr.eu-west-1.amazonaws.com",
            "imageRepository": "glucose",
            "gpuCount": 1,
            "hourlyPriceUsd": 0.9,
            "spot": True,
            "containerEnv": {"A": 1},
            "dockerNetwork": "host",
        },
    )
    target = load_target_file(path)
    assert (target.host, target.ssh_port, target.ssh_user) == ("10.0.0.5", 2222, "ubuntu")
    assert target.ssh_key_path == tmp_path / "keys/id"  # relative to the target file
    assert target.storage_uri == "s3://bucket/prefix"
    assert target.image_name == "123.dkr.ecr.eu-west-1.amazonaws.com/glucose"
    assert (target.gpu_count, target.hourly_price_usd, target.spot) == (1, 0.9, True)
    assert target.container_env == {"A": "1"}
    assert target.box_root == contract.BOX_ROOT


def test_target_file_without_registry_keeps_a_bare_image_name(tmp_path):
    path = _write(tmp_path / "t.json", {"hosts": "h", "sshUser": "u", "storageUri": "file:///s"})
    target = load_target_file(path)
    assert target.hosts == ("h",)
    assert target.registry == ""
    assert target.image_name == "glucose-training"


def test_a_stack_of_three_boxes_reaches_boxes_1_and_2_through_box_0(tmp_path):
    outputs = {"hosts": ["54.1.2.3"], "privateHosts": ["10.42.0.4", "10.42.0.9", "10.42.0.7"],
               "sshUser": "u", "storageUri": "file:///s"}  # fmt: skip
    target = load_target_file(_write(tmp_path / "t.json", outputs))
    assert target.node_count == 3
    assert [target.ssh_route(node) for node in range(3)] == [
        ("54.1.2.3", None),
        ("10.42.0.9", "54.1.2.3"),
        ("10.42.0.7", "54.1.2.3"),
    ]
    assert [target.private_address(node) for node in range(3)] == list(outputs["privateHosts"])
    with pytest.raises(Exit, match="has 3 box"):
        target.ssh_route(3)


def test_hosts_of_their_own_are_reached_directly(tmp_path):
    # A lab's two servers on one LAN, or a stack from before privateHosts.
    outputs = {"hosts": ["10.1.0.5", "10.1.0.6"], "sshUser": "u", "storageUri": "file:///s"}
    target = load_target_file(_write(tmp_path / "t.json", outputs))
    assert (target.node_count, target.ssh_route(1), target.private_address(1)) == (
        2,
        ("10.1.0.6", None),
        "10.1.0.6",
    )


def test_target_file_missing_keys_are_named(tmp_path):
    path = _write(tmp_path / "t.json", {"hosts": ["h"]})
    with pytest.raises(Exit, match="missing sshUser, storageUri"):
        load_target_file(path)


def test_target_file_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("hosts: [h]")
    with pytest.raises(Exit, match="not valid JSON"):
        load_target_file(path)


def test_environment_variable_selects_the_target_file(tmp_path, monkeypatch):
    path = _write(tmp_path / "t.json", {"hosts": ["h"], "sshUser": "u", "storageUri": "file:///s"})
    monkeypatch.setenv("GLUCOSE_TARGET", str(path))
    assert resolve_target().source == f"target file {path}"


def test_no_pulumi_cli_and_no_target_file_says_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GLUCOSE_TARGET"}
    env["PATH"] = str(tmp_path)  # no pulumi here
    result = subprocess.run(
        [str(FAB), "status"], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert_one_line_error(result, "`pulumi` CLI is not installed", "GLUCOSE_TARGET")


def _fab_status(target: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FAB), "status", "--target", str(target)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


MINIMAL = {"hosts": ["h"], "sshUser": "u", "storageUri": "file:///s"}


def test_a_misspelt_target_file_key_is_refused_with_the_key_it_resembles(tmp_path):
    path = _write(tmp_path / "lab.json", {**MINIMAL, "sshKeyPaht": "~/.ssh/id_ed25519"})
    result = _fab_status(path)
    assert result.returncode == 1
    assert_one_line_error(
        result, f"target file {path}: unknown key 'sshKeyPaht'; did you mean sshKeyPath?"
    )


def test_a_target_file_may_hold_every_stack_output_fab_box_update_reads(tmp_path):
    guard = {"idleShutdownMinutes": 45, "autoShutdownTime": "22:00", "amiId": "ami-0123abcd"}
    assert load_target_file(_write(tmp_path / "t.json", {**MINIMAL, **guard})).hosts == ("h",)


def test_a_target_file_cloud_must_be_one_fab_knows(tmp_path):
    path = _write(tmp_path / "lab.json", {**MINIMAL, "cloud": "gcp"})
    result = _fab_status(path)
    assert result.returncode == 1
    assert_one_line_error(result, "cloud 'gcp' is not one of azure, aws, local")


def test_a_lab_box_target_file_names_the_webhook_told_of_run_ends(tmp_path):
    url = "https://hooks.slack.com/services/T0/B0/XXXX"
    keys = {"hosts": ["10.0.0.5"], "sshUser": "me", "storageUri": "s3://b", "notifyWebhook": url}
    assert load_target_file(_write(tmp_path / "lab.json", keys)).notify_webhook == url


def test_this_machines_target_file_may_name_a_webhook_on_this_machine_over_http(tmp_path):
    keys = {"notifyWebhook": "http://127.0.0.1:8099/hook"}
    target = load_target_file(_write(tmp_path / "here.json", keys))
    assert target.notify_webhook == "http://127.0.0.1:8099/hook"


@pytest.mark.parametrize("url", ["http://hooks.example.com/T0/secret", "hooks.slack.com/x"])
def test_a_webhook_neither_https_nor_on_this_machine_is_refused_without_its_secret_path(
    tmp_path, url
):
    path = _write(tmp_path / "here.json", {"notifyWebhook": url})
    with pytest.raises(Exit) as refused:
        load_target_file(path)
    message = str(refused.value.message)
    assert "notifyWebhook" in message and "an https URL" in message
    assert "/T0/secret" not in message and "/x" not in message


def test_every_key_but_the_guard_settings_and_ami_id_is_one_target_fields():
    from ops.target.schema import KEYS, TARGET_FILE_KEYS

    extra = {s.stack_key for s in GUARD_SETTINGS} | {"amiId"}
    assert set(TARGET_FILE_KEYS) - extra <= set(KEYS.values())
    assert len(set(KEYS.values())) == len(KEYS)


def test_an_absent_or_empty_key_reads_as_its_fields_default_and_zero_is_a_value(tmp_path):
    box = {"cloud": "local", "hosts": ["10.0.0.5"], "sshUser": "u", "storageUri": "s3://b"}
    target = load_target_file(_write(tmp_path / "box.json", {**box, "boxRoot": ""}))
    assert (target.box_root, target.ssh_port, target.capacity_wait_minutes) == (
        contract.BOX_ROOT, 22, 5,
    )  # fmt: skip
    zeros = {**box, "capacityWaitMinutes": 0, "gpuCount": 0}
    target = load_target_file(_write(tmp_path / "zeros.json", zeros))
    assert (target.capacity_wait_minutes, target.gpu_count) == (0, 0)
