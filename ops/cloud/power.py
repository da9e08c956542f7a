"""A box's power, the same on both clouds: what `ops.cloud.api` answers and each cloud's
module reports."""

from __future__ import annotations

from dataclasses import dataclass

RUNNING = "running"
STARTING = "starting"
STOPPING = "stopping"
STOPPED = "stopped"
GONE = "gone"
"""Terminated or deleted: `pulumi up --refresh` makes the box again (GONE_FIX)."""
# A plain `pulumi up` compares the program with the state, which still holds the box.
# The refresh reads the cloud and adopts what changed there
# (https://www.pulumi.com/docs/iac/cli/commands/pulumi_refresh/): an Azure VM deleted
# out of band leaves the state; the AWS boxes' read (pulumi/infra/aws/boxes.py) answers
# an empty id for a set with no box and no live spot request left, which leaves it too,
# and a set short of a box is replaced whole by the up that follows.
GONE_FIX = "`pulumi up --refresh` makes it again (a plain `pulumi up` does not see it gone)"


@dataclass(frozen=True)
class BoxPower:
    node: int
    box_id: str
    state: str
    """RUNNING, STARTING, STOPPING, STOPPED or GONE."""
    why: str = ""
    """What stopped it, as the cloud tells (and when), or "" when it does not say."""

    def line(self) -> str:
        why = f" ({self.why})" if self.why else ""
        return f"box {self.node} ({self.box_id}): {self.state}{why}"
