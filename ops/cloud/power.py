"""A box's power, the same on both clouds: what `ops.cloud.api` answers and each cloud's
module reports."""

from __future__ import annotations

from dataclasses import dataclass

RUNNING = "running"
STARTING = "starting"
STOPPING = "stopping"
STOPPED = "stopped"
GONE = "gone"
"""Terminated or deleted: `pulumi up` makes the box again."""


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
