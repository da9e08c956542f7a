"""The boxes' power, from each cloud's own API: what stopped a box, and `fab start`.

AWS against moto's EC2; Azure against the local fake of ARM, with the deployer's token
from azure-identity as a logged-in Azure CLI gives it (an `az` on PATH that answers).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from ops.cloud import api as power
from ops.cloud.power import GONE, RUNNING, STARTING, STOPPED
from ops.target.resolve import from_outputs
from tests.fixtures.clouds import VM, instances, target_outputs
from tests.ops.conftest import FAB
from tests.paths import REPO

pytestmark = pytest.mark.e2e  # moto


def test_aws_says_which_box_is_stopped_and_what_stopped_it(ec2):
    running, stopped = instances(ec2, 2)
    ec2.stop_instances(InstanceIds=[stopped])
    boxes = power.states(from_outputs(target_outputs("aws", [running, stopped]), "stack test"))
    assert [(box.node, box.box_id, box.state) for box in boxes] == [
        (0, running, RUNNING),
        (1, stopped, STOPPED),
    ]
    assert "stopped from outside the box" in boxes[1].why


def test_aws_start_starts_every_stopped_box(ec2):
    ids = instances(ec2, 2)
    ec2.stop_instances(InstanceIds=ids)
    after = power.start(from_outputs(target_outputs("aws", ids), "stack test"))
    assert {box.state for box in after} <= {RUNNING, STARTING}


def test_an_aws_box_that_is_gone_says_so(ec2):
    (instance,) = instances(ec2, 1)
    ec2.terminate_instances(InstanceIds=[instance])
    (box,) = power.states(from_outputs(target_outputs("aws", [instance]), "stack test"))
    assert box.state == GONE


def test_start_with_a_box_gone_starts_none_and_says_pulumi_up_makes_it_again(ec2):
    gone, stopped = instances(ec2, 2)
    ec2.terminate_instances(InstanceIds=[gone])
    ec2.stop_instances(InstanceIds=[stopped])
    with pytest.raises(Exit, match=rf"box 0 \({gone}\): gone .*`pulumi up --refresh` makes it"):
        power.start(from_outputs(target_outputs("aws", [gone, stopped]), "stack test"))
    (box,) = ec2.describe_instances(InstanceIds=[stopped])["Reservations"][0]["Instances"]
    assert box["State"]["Name"] == "stopped"


def test_azure_reads_each_vms_power_with_the_deployers_token(azure):
    target = from_outputs(target_outputs("azure", [VM.format(0), VM.format(1)]), "stack test")
    boxes = power.states(target)
    assert [box.state for box in boxes] == [RUNNING, STOPPED]
    assert "deallocated" in boxes[1].why
    assert {token for _, token in azure.state.requests} == {"deployer-token"}


def test_azure_start_starts_the_deallocated_vm_and_leaves_the_running_one(azure):
    target = from_outputs(target_outputs("azure", [VM.format(0), VM.format(1)]), "stack test")
    assert [box.state for box in power.start(target)] == [RUNNING, RUNNING]
    posts = [path for path, _ in azure.state.requests if path.endswith("/start")]
    assert posts == [f"{VM.format(1)}/start"]


def test_a_box_no_cloud_knows_of_cannot_be_started_and_says_so():
    target = from_outputs({**target_outputs("aws", []), "boxIds": None}, "target file box.json")
    with pytest.raises(Exit, match=r"names no cloud boxes \(no boxIds\): `fab` cannot ask"):
        power.start(target)


def _fab(tmp_path: Path, target: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "target.json"
    path.write_text(json.dumps(target))
    return subprocess.run(
        [str(FAB), *args, "--target", str(path)],
        cwd=REPO,
        env={**os.environ, "GLUCOSE_KNOWN_HOSTS": str(tmp_path / "known_hosts")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_task_that_needs_a_stopped_box_says_so_at_once_and_how_to_start_it(ec2, tmp_path):
    (instance,) = instances(ec2, 1)
    ec2.stop_instances(InstanceIds=[instance])
    result = _fab(tmp_path, target_outputs("aws", [instance]), "logs")
    assert result.returncode == 1
    assert f"box 0 ({instance}): stopped" in result.stderr
    assert "`fab start` starts every box" in result.stderr


def test_status_of_a_stopped_stack_shows_each_boxs_power_and_what_to_do(ec2, tmp_path):
    (instance,) = instances(ec2, 1)
    ec2.stop_instances(InstanceIds=[instance])
    result = _fab(tmp_path, target_outputs("aws", [instance]), "status", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert [box["state"] for box in shown["power"]] == ["stopped"]
    assert shown["run"] is None and "fab status --start" in shown["notes"][0]


def test_download_from_a_stopped_box_points_to_offline(ec2, tmp_path):
    (instance,) = instances(ec2, 1)
    ec2.stop_instances(InstanceIds=[instance])
    result = _fab(tmp_path, target_outputs("aws", [instance]), "download", "--run", "r1")
    assert result.returncode == 1
    assert "fab download --offline" in result.stderr
