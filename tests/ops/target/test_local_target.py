"""Which target is this machine: the word `local`, or a target file without hosts; its
defaults beside the checkout; what makes no sense without SSH, refused in one line."""

import json
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from ops import CHECKOUT
from ops.target.guard_rails import none_note, unbilled_note
from ops.target.resolve import load_target_file, resolve_target


def _write(path: Path, outputs: dict) -> Path:
    path.write_text(json.dumps(outputs))
    return path


def test_the_word_local_is_this_machine_with_its_files_beside_the_checkout():
    target = resolve_target("local")
    assert target.this_machine and not target.set_up_by_cloud_init
    assert (target.cloud, target.hosts, target.registry) == ("local", (), "")
    assert target.box_root == str(CHECKOUT / "local" / "box")
    assert target.storage_uri == f"file://{CHECKOUT / 'local' / 'storage'}"
    assert target.node_count == 1


def test_glucose_target_local_selects_this_machine_for_every_task(monkeypatch):
    monkeypatch.setenv("GLUCOSE_TARGET", "local")
    assert resolve_target().this_machine


def test_a_target_file_without_hosts_is_this_machine_with_its_own_keys(tmp_path):
    path = _write(
        tmp_path / "here.json",
        {"storageUri": "s3://bucket/glucose", "boxRoot": str(tmp_path / "box"),
         "containerEnv": {"AWS_REGION": "eu-west-1"}, "gpuCount": 2},
    )  # fmt: skip
    target = load_target_file(path)
    assert target.this_machine
    assert (target.storage_uri, target.box_root) == ("s3://bucket/glucose", str(tmp_path / "box"))
    assert (target.container_env, target.gpu_count) == ({"AWS_REGION": "eu-west-1"}, 2)
    assert target.source == f"target file {path}"


def test_ssh_keys_without_hosts_are_refused_as_a_forgotten_address(tmp_path):
    path = _write(tmp_path / "t.json", {"sshUser": "me", "storageUri": "file:///s"})
    with pytest.raises(Exit, match="has sshUser but no hosts; list the box's address in hosts"):
        load_target_file(path)


def test_a_registry_for_this_machine_is_refused(tmp_path):
    path = _write(tmp_path / "t.json", {"registry": "127.0.0.1:5000"})
    with pytest.raises(Exit, match="this machine runs the image its own engine built"):
        load_target_file(path)


def test_a_cloud_target_file_without_hosts_still_names_the_missing_keys(tmp_path):
    path = _write(tmp_path / "t.json", {"cloud": "aws", "storageUri": "s3://b"})
    with pytest.raises(Exit, match="missing hosts, sshUser"):
        load_target_file(path)


def test_only_boxes_pulumi_made_have_guard_rails(tmp_path):
    cloud = {"cloud": "aws", "hosts": ["10.0.0.5"], "sshUser": "u", "storageUri": "s3://b"}
    lab = {**cloud, "cloud": "local"}
    assert none_note(load_target_file(_write(tmp_path / "cloud.json", cloud))) is None
    assert none_note(load_target_file(_write(tmp_path / "lab.json", lab))).startswith(
        "none on this lab box"
    )
    assert none_note(resolve_target("local")).startswith(
        "none on this machine: no idle watchdog, daily stop or budget (this machine bills nothing)"
    )


def test_a_run_here_costs_nothing_in_one_wording_and_a_priced_target_file_its_price(tmp_path):
    lab = {"hosts": ["10.0.0.5"], "sshUser": "u", "storageUri": "s3://b"}
    lab_file = _write(tmp_path / "lab.json", lab)
    priced = _write(tmp_path / "priced.json", {"hourlyPriceUsd": 0.5})
    assert unbilled_note(resolve_target("local")) == "this machine bills nothing"
    lab_note = unbilled_note(load_target_file(lab_file))
    assert lab_note == f"no hourlyPriceUsd in target file {lab_file}"
    assert unbilled_note(load_target_file(priced)) is None
    cloud = {**lab, "cloud": "aws", "hourlyPriceUsd": 1.0}
    assert unbilled_note(load_target_file(_write(tmp_path / "cloud.json", cloud))) is None
