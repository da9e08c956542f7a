"""`fab start --move`: the one way a stack's boxes change zone, and it is Pulumi's.

A stopped box's disk lives in its zone: no start, retry or resize (ops/cloud/capacity.py)
ever takes it elsewhere. When its zone has no room for any candidate, `--move` has
Pulumi make the boxes again, and the cloud's own engine picks where, in the stack's
order of candidates:

- AWS: `pulumi up --replace` of the boxes' resource (infra/aws/boxes.py): EC2 Fleet
  walks every candidate and zone again; the new boxes come up before the old go. Several
  boxes share a cluster placement group, which holds its instances in one zone
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html):
  it is replaced too, or the new boxes would be pinned to the old zone by the old ones.
  Pulumi makes the new group first (its name is generated), the launch template's next
  version names it, and the old group goes once the old boxes have.
- Azure: `pulumi destroy --target` of each VM and what hangs on it, then `pulumi up`:
  a VM keeps its name, so it must go before it comes back; Azure picks the zone again.

The disks go with the old boxes (their datasets cache too); what is in storage stays,
and `fab train --run ID` resumes a run from its last uploaded checkpoint.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable

from invoke.exceptions import Exit

from ops.target.resolve import PULUMI_TIMEOUT_SECONDS
from ops.target.schema import Target

# Making GPU boxes again, with their first boot: minutes, not hours.
PULUMI_UP_TIMEOUT_SECONDS = 60 * 60
BOXES_TYPE = {
    "aws": "pulumi-python:dynamic/glucose-training:Ec2Boxes",
    "azure": "azure-native:compute:VirtualMachine",
}
# Made again with the boxes: what would otherwise hold them to their old zone.
MOVED_WITH_BOXES = {"aws": ("aws:ec2/placementGroup:PlacementGroup",), "azure": ()}


def commands(cloud: str, urns: list[str], stack: str | None) -> list[list[str]]:
    """The Pulumi command lines that make the boxes `urns` again elsewhere."""
    chosen = ["--stack", stack] if stack else []
    if cloud == "aws":
        replace = [arg for urn in urns for arg in ("--replace", urn)]
        return [["pulumi", "up", "--yes", *chosen, *replace]]
    targets = [arg for urn in urns for arg in ("--target", urn)]
    return [
        ["pulumi", "destroy", "--yes", *chosen, *targets, "--target-dependents"],
        ["pulumi", "up", "--yes", *chosen],
    ]


def move(
    target: Target, stack: str | None, say: Callable[[str], None], dry_run: bool = False
) -> None:
    """Have Pulumi make `target`'s boxes again (another zone when theirs has no room)."""
    if target.target_file is not None or target.cloud not in BOXES_TYPE:
        raise Exit(
            f"{target.source}: only a Pulumi stack's boxes can move (`pulumi up` made them); "
            "a target file's box is not Pulumi's to replace"
        )
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise Exit("`fab start --move` runs Pulumi, and the `pulumi` CLI is not installed")
    urns = _urns(pulumi, stack, BOXES_TYPE[target.cloud], MOVED_WITH_BOXES[target.cloud])
    say(
        f"moving the {len(target.box_ids)} box(es) of {target.source}: they and their disks "
        "are made again where the cloud has room; storage stays, and `fab train --run ID` "
        "resumes a run from its last checkpoint there"
    )
    for line in commands(target.cloud, urns, stack):
        say("$ " + " ".join(line))
        if dry_run:
            continue
        done = subprocess.run([pulumi, *line[1:]], timeout=PULUMI_UP_TIMEOUT_SECONDS, check=False)
        if done.returncode != 0:
            raise Exit(f"`{' '.join(line[:2])}` failed (exit {done.returncode}); see above")


def _urns(
    pulumi: str, stack: str | None, boxes_type: str, with_boxes: tuple[str, ...]
) -> list[str]:
    """The URNs of the stack's boxes and of what moves with them (`with_boxes`' types), in
    the stack's order, from `pulumi stack export`."""
    command = [pulumi, "stack", "export"] + (["--stack", stack] if stack else [])
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=PULUMI_TIMEOUT_SECONDS, check=False
    )
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Exit(f"cannot read the stack's resources ({detail}); run `pulumi stack select`")
    resources = (json.loads(done.stdout or "{}").get("deployment") or {}).get("resources") or []
    if not any(r.get("type") == boxes_type for r in resources):
        raise Exit(f"the stack holds no {boxes_type}: nothing to move; run `pulumi up`")
    return [r["urn"] for r in resources if r.get("type") in (boxes_type, *with_boxes)]
