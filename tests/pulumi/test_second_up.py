"""The tenth `pulumi up` does not hurt: the program run again a week later, under mocks.

Between the runs the AWS Deep Learning AMI was republished and the box programs
changed. The engine would diff each resource's new inputs against the old, minus the
resource's ignore_changes; a difference left over would be an update (or, for an AMI
or Azure custom data, a replacement). So: run twice, diff the recorded inputs the way
the engine does, and demand that nothing is left but what the stack file changed.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from infra.aws.boxes import boxes_provider
from stack import box_packing
from tests.fakes import aws_program, azure_program
from tests.fakes.pulumi_mocks import RunResult, unwrap

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
BOXES = "pulumi-python:dynamic/glucose-training:Ec2Boxes"
VM = "azure-native:compute:VirtualMachine"


def _without(inputs: dict[str, Any], ignored: tuple[str, ...]) -> dict[str, Any]:
    """`inputs` with every ignore_changes path (dotted, camelCase) taken out."""
    kept = copy.deepcopy(unwrap(inputs))
    for path in ignored:
        *parents, last = path.split(".")
        node = kept
        for part in parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(last, None)
    return kept


def engine_diff(before: RunResult, after: RunResult) -> set[tuple[str, str]]:
    """(resource, property) pairs the engine would update or replace."""
    old = {r.name: r for r in before.custom}
    changed = set()
    for resource in after.custom:
        assert resource.name in old, f"{resource.name} would be created"
        previous = _without(old[resource.name].inputs, resource.ignore_changes)
        current = _without(resource.inputs, resource.ignore_changes)
        changed |= {
            (resource.name, key)
            for key in set(previous) | set(current)
            if previous.get(key) != current.get(key)
        }
    assert {r.name for r in before.custom} == {r.name for r in after.custom}, "a delete"
    return changed


def change_box_programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """From now on box/ has the watchdog edited, as the next commit might."""
    box = tmp_path / "box"
    shutil.copytree(box_packing.BOX_DIR, box)
    watchdog = box / "watchdog.py"
    watchdog.write_text(watchdog.read_text() + "LATER_FIX = True\n")
    monkeypatch.setattr(box_packing, "BOX_DIR", box)
    return box


# New programs are a new archive under a new key (its sha256): that one object is
# replaced, the old kept for the boxes that pin it (retain_on_delete).
NEW_AWS_ARCHIVE = {("glucose-box-programs", "key"), ("glucose-box-programs", "content")}
NEW_AZURE_ARCHIVE = {
    ("glucose-box-programs", "key"),
    ("glucose-box-programs", "sha256"),
    ("glucose-box-programs", "archive"),
}


@pytest.mark.parametrize("spot", ["false", "true"])
def test_aws_up_again_after_a_new_ami_and_new_box_programs_changes_nothing(
    spot, tmp_path, monkeypatch
):
    first = aws_program.run_stack(spot=spot, nodeCount="2")
    change_box_programs(tmp_path, monkeypatch)
    later = aws_program.run_stack(
        aws_program.aws_recorder(ami_id=aws_program.NEWER_AMI_ID), spot=spot, nodeCount="2"
    )
    # Both changes reach the launch template alone: a new version, which only boxes
    # launched later boot; the boxes themselves are not touched.
    old, new = first.one(TEMPLATE).inputs, later.one(TEMPLATE).inputs
    assert (old["imageId"], new["imageId"]) == (aws_program.AMI_ID, aws_program.NEWER_AMI_ID)
    assert engine_diff(first, later) == NEW_AWS_ARCHIVE | {
        ("glucose-box-template", "imageId"),
        ("glucose-box-template", "userData"),
    }
    boxes = {**unwrap(later.one(BOXES).inputs), "launchTemplateVersion": "2"}
    assert boxes_provider().diff("i-0", unwrap(first.one(BOXES).inputs), boxes).replaces == []


def test_azure_up_again_after_new_box_programs_changes_nothing(tmp_path, monkeypatch):
    first = azure_program.run_stack(nodeCount="2")
    change_box_programs(tmp_path, monkeypatch)
    later = azure_program.run_stack(nodeCount="2")
    old, new = first.named("glucose-0-vm").inputs, later.named("glucose-0-vm").inputs
    assert old["osProfile"]["customData"] != new["osProfile"]["customData"]
    assert "osProfile.customData" in later.named("glucose-0-vm").ignore_changes
    assert engine_diff(first, later) == NEW_AZURE_ARCHIVE


def test_a_new_idle_limit_changes_the_alarm_and_the_next_boxes_settings_not_the_box():
    first = aws_program.run_stack()
    later = aws_program.run_stack(idleShutdownMinutes="60")
    assert engine_diff(first, later) == {
        ("glucose-idle-0", "alarmDescription"),
        ("glucose-idle-0", "evaluationPeriods"),
        ("glucose-idle-0", "datapointsToAlarm"),
        # A new template version: running boxes get it by `fab box-update`.
        ("glucose-box-template", "userData"),
    }


def _boxes_diff(before: RunResult, after: RunResult):
    """What the boxes' provider answers the engine: the state `before` left (its outputs,
    the pickled provider included) against the inputs `after` declares."""
    state, inputs = (unwrap(r.one(BOXES).outputs) for r in (before, after))
    return boxes_provider().diff("i-0", state, {**inputs, "__provider": "pickled again"})


def test_aws_up_again_with_nothing_changed_shows_no_change_on_the_boxes():
    first, later = aws_program.run_stack(), aws_program.run_stack()
    assert engine_diff(first, later) == set()
    assert _boxes_diff(first, later).changes is False


def test_pinning_amiId_to_the_image_the_boxes_boot_changes_nothing():
    # docs/clouds.md: pin `amiId` to `pulumi stack output amiId`.
    first = aws_program.run_stack()
    pinned = aws_program.run_stack(amiId=first.exports["amiId"])
    assert engine_diff(first, pinned) == {("glucose-boxes", "pinnedImageId")}
    assert _boxes_diff(first, pinned).changes is False
    unpinned = aws_program.run_stack(aws_program.aws_recorder(aws_program.NEWER_AMI_ID))
    assert _boxes_diff(pinned, unpinned).replaces == []


def test_aws_boxes_keep_their_image_but_a_pinned_ami_change_replaces_them():
    looked_up = unwrap(aws_program.run_stack().one(BOXES).inputs)
    assert looked_up["pinnedImageId"] == ""
    first = aws_program.run_stack(amiId="ami-0123456789abcdef0")
    moved = aws_program.run_stack(amiId="ami-0fedcba9876543210")
    # A pinned amiId moved to another image on purpose: that replaces the boxes.
    assert _boxes_diff(first, moved).replaces == ["pinnedImageId"]


def test_a_pinned_ami_is_used_as_given():
    result = aws_program.run_stack(amiId="ami-0123456789abcdef0")
    assert result.one(TEMPLATE).inputs["imageId"] == "ami-0123456789abcdef0"
    (lookup,) = [args for token, args in result.calls if "getAmi" in token]
    # Looked up by its id only for its root device name.
    assert lookup["filters"] == [{"name": "image-id", "values": ["ami-0123456789abcdef0"]}]


def test_azure_vm_keeps_a_size_fab_start_gave_it_and_its_zone_choice():
    vm = azure_program.run_stack().named("glucose-0-vm")
    assert {"hardwareProfile.vmSize", "placement"} <= set(vm.ignore_changes)


def test_the_ami_the_box_runs_is_exported_to_pin_it_with():
    result = aws_program.run_stack()
    assert result.exports["amiId"] == aws_program.AMI_ID
