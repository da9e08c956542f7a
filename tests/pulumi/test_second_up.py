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

from stack import box_packing
from tests.fakes import aws_program, azure_program
from tests.fakes.pulumi_mocks import RunResult, unwrap

INSTANCE = "aws:ec2/instance:Instance"
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
    # Both changes reached the declared inputs; the engine must ignore them.
    old, new = first.named("glucose-box-0").inputs, later.named("glucose-box-0").inputs
    assert (old["ami"], new["ami"]) == (aws_program.AMI_ID, aws_program.NEWER_AMI_ID)
    assert old["userDataBase64"] != new["userDataBase64"]
    assert engine_diff(first, later) == NEW_AWS_ARCHIVE


def test_azure_up_again_after_new_box_programs_changes_nothing(tmp_path, monkeypatch):
    first = azure_program.run_stack(nodeCount="2")
    change_box_programs(tmp_path, monkeypatch)
    later = azure_program.run_stack(nodeCount="2")
    old, new = first.named("glucose-0-vm").inputs, later.named("glucose-0-vm").inputs
    assert old["osProfile"]["customData"] != new["osProfile"]["customData"]
    assert "osProfile.customData" in later.named("glucose-0-vm").ignore_changes
    assert engine_diff(first, later) == NEW_AZURE_ARCHIVE


def test_a_new_idle_limit_changes_only_the_cloudwatch_alarm_not_the_box():
    first = aws_program.run_stack()
    later = aws_program.run_stack(idleShutdownMinutes="60")
    assert engine_diff(first, later) == {
        ("glucose-idle-0", "alarmDescription"),
        ("glucose-idle-0", "evaluationPeriods"),
        ("glucose-idle-0", "datapointsToAlarm"),
    }


def test_aws_box_keeps_its_ami_and_user_data_but_not_a_pinned_ami_change():
    looked_up = aws_program.run_stack().one(INSTANCE)
    assert {"ami", "userData", "userDataBase64"} <= set(looked_up.ignore_changes)
    assert looked_up.inputs["userDataReplaceOnChange"] is False
    pinned = aws_program.run_stack(amiId="ami-0123456789abcdef0").one(INSTANCE)
    # A pinned amiId is moved on purpose: changing it must replace the box.
    assert "ami" not in pinned.ignore_changes
    assert {"userData", "userDataBase64"} <= set(pinned.ignore_changes)


def test_a_pinned_ami_is_used_as_given_without_a_lookup():
    result = aws_program.run_stack(amiId="ami-0123456789abcdef0")
    assert result.one(INSTANCE).inputs["ami"] == "ami-0123456789abcdef0"
    assert not [token for token, _ in result.calls if "getAmi" in token]
    assert result.exports["amiId"] == "ami-0123456789abcdef0"


def test_the_ami_the_box_runs_is_exported_to_pin_it_with():
    result = aws_program.run_stack()
    assert result.exports["amiId"] == aws_program.AMI_ID
