"""`fab start --move`: the one way the boxes change zone, and Pulumi does it.

The Pulumi CLI cannot be installed here (docs/local.md); as the Azure CLI is in the
power tests, a `pulumi` on PATH stands in for it: it answers `stack output --json` and
`stack export` from a stack's state as Pulumi writes it, and records every other
command line, which is what `fab` decides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from invoke.exceptions import Exit

from ops.cloud import move
from ops.target.resolve import from_outputs
from tests.fixtures.clouds import VM, target_outputs
from tests.ops.conftest import FAB
from tests.paths import REPO

STACK_URN = "urn:pulumi:dev::glucose-training::"
BOXES_URN = (
    f"{STACK_URN}glucose-training:aws:TrainingBox$"
    "pulumi-python:dynamic/glucose-training:Ec2Boxes::glucose-boxes"
)
GROUP_URN = (
    f"{STACK_URN}glucose-training:aws:TrainingBox$"
    "aws:ec2/placementGroup:PlacementGroup::glucose-cluster"
)
VM_URNS = [
    STACK_URN
    + f"glucose-training:azure:TrainingBox$azure-native:compute:VirtualMachine::glucose-{n}-vm"
    for n in (0, 1)
]
FAKE_PULUMI = """#!{python}
import json, sys
state = json.load(open({state!r}))
args = sys.argv[1:]
if args[:2] == ["stack", "output"]:
    print(json.dumps(state["outputs"]))
elif args[:2] == ["stack", "export"]:
    print(json.dumps({{"version": 3, "deployment": {{"resources": state["resources"]}}}}))
else:
    with open({log!r}, "a") as log:
        log.write(json.dumps(args) + "\\n")
"""


@pytest.fixture
def pulumi(tmp_path, monkeypatch):
    """A `pulumi` on PATH answering from `state` (outputs, resources); returns the state
    and a reader of the command lines it ran."""
    state_file, log = tmp_path / "state.json", tmp_path / "pulumi.log"
    script = tmp_path / "bin" / "pulumi"
    script.parent.mkdir()
    script.write_text(
        FAKE_PULUMI.format(python=sys.executable, state=str(state_file), log=str(log))
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")

    def stack(outputs: dict, resources: list[dict]) -> None:
        state_file.write_text(json.dumps({"outputs": outputs, "resources": resources}))

    def ran() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return stack, ran


def _resources(*urns_and_types: tuple[str, str]) -> list[dict]:
    other = {
        "urn": STACK_URN + "pulumi:pulumi:Stack::glucose-training-dev",
        "type": "pulumi:pulumi:Stack",
    }
    return [other, *({"urn": urn, "type": kind} for urn, kind in urns_and_types)]


def test_aws_boxes_are_replaced_by_one_pulumi_up(pulumi):
    stack, ran = pulumi
    stack({}, _resources((BOXES_URN, move.BOXES_TYPE["aws"])))
    target = from_outputs(target_outputs("aws", ["i-0123456789abcdef0"]), "stack dev")
    said: list[str] = []
    move.move(target, "dev", said.append)
    assert ran() == [["up", "--yes", "--stack", "dev", "--replace", BOXES_URN]]
    assert "their disks are made again" in said[0] and "`fab train --run ID`" in said[0]


def test_several_aws_boxes_move_with_a_new_cluster_placement_group(pulumi):
    # A cluster placement group keeps its instances in one zone: the old group, still
    # holding the old boxes, would pin the new ones there.
    stack, ran = pulumi
    group = (GROUP_URN, "aws:ec2/placementGroup:PlacementGroup")
    stack({}, _resources(group, (BOXES_URN, move.BOXES_TYPE["aws"])))
    ids = ["i-0123456789abcdef0", "i-0123456789abcdef1"]
    move.move(from_outputs(target_outputs("aws", ids), "stack dev"), None, lambda line: None)
    assert ran() == [["up", "--yes", "--replace", GROUP_URN, "--replace", BOXES_URN]]


def test_azure_vms_go_before_they_come_back(pulumi):
    stack, ran = pulumi
    stack({}, _resources(*((urn, move.BOXES_TYPE["azure"]) for urn in VM_URNS)))
    target = from_outputs(target_outputs("azure", [VM.format(0), VM.format(1)]), "stack dev")
    move.move(target, None, lambda line: None)
    destroy = ["destroy", "--yes", "--target", VM_URNS[0], "--target", VM_URNS[1]]
    assert ran() == [[*destroy, "--target-dependents"], ["up", "--yes"]]


def test_a_dry_run_prints_the_commands_and_runs_none(pulumi):
    stack, ran = pulumi
    stack({}, _resources((BOXES_URN, move.BOXES_TYPE["aws"])))
    target = from_outputs(target_outputs("aws", ["i-0123456789abcdef0"]), "stack dev")
    said: list[str] = []
    move.move(target, "dev", said.append, dry_run=True)
    assert ran() == []
    assert said[1] == f"$ pulumi up --yes --stack dev --replace {BOXES_URN}"


def test_a_target_files_box_is_not_pulumis_to_move(tmp_path):
    target = from_outputs(
        target_outputs("aws", ["i-0123456789abcdef0"]), "target file t.json", tmp_path / "t.json"
    )
    with pytest.raises(Exit, match="only a Pulumi stack's boxes can move"):
        move.move(target, None, lambda line: None)


def test_fab_start_moves_only_when_asked(pulumi, tmp_path):
    stack, ran = pulumi
    outputs = {
        **target_outputs("aws", ["i-0123456789abcdef0"]),
        "hosts": ["198.51.100.10"],
        "placement": {"size": "g6.xlarge", "zone": "us-east-1a", "market": "on-demand"},
    }
    stack(outputs, _resources((BOXES_URN, move.BOXES_TYPE["aws"])))
    done = subprocess.run(
        [str(FAB), "start", "--move", "--dry-run", "--stack", "dev"],
        cwd=REPO,
        env={**os.environ, "GLUCOSE_KNOWN_HOSTS": str(tmp_path / "known_hosts")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"$ pulumi up --yes --stack dev --replace {BOXES_URN}" in done.stderr
    assert ran() == []
