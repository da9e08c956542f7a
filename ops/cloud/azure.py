"""Azure: the boxes' power from ARM (a VM's instance view, its `start`), your token.

ARM's instance view says what power state a VM is in, not what put it there: the box's
own stop record says that once it is up again (`fab status`).
"""

from __future__ import annotations

from invoke.exceptions import Exit

from ops.cloud.api import GONE, RUNNING, STARTING, STOPPED, STOPPING, BoxPower
from ops.target.resolve import Target
from stack.arm import ArmClient, ArmError

API = "virtual_machines"
STATES = {
    "PowerState/starting": STARTING,
    "PowerState/running": RUNNING,
    "PowerState/stopping": STOPPING,
    "PowerState/deallocating": STOPPING,
    "PowerState/stopped": STOPPED,
    "PowerState/deallocated": STOPPED,
}
WHY = {
    "PowerState/stopped": "stopped but not deallocated: Azure still bills it",
    "PowerState/deallocated": "deallocated (by its idle watchdog, the daily stop, a budget "
    "stop, a spot eviction or by hand)",
}


def _arm() -> ArmClient:
    from ops.preflight.azure import deployer_token

    try:
        return ArmClient.from_environment(deployer_token())
    except Exception as error:  # azure-identity raises its own kinds: one line for them all
        raise Exit(f"no Azure credentials ({type(error).__name__}); run `az login`") from None


def states(target: Target) -> list[BoxPower]:
    arm = _arm()
    return [_power(arm, node, box_id) for node, box_id in enumerate(target.box_ids)]


def start(target: Target) -> list[BoxPower]:
    arm = _arm()
    for box in states(target):
        if box.state == STOPPED:
            try:
                arm.post(f"{box.box_id}/start", API)
            except ArmError as error:
                raise Exit(f"Azure would not start {box.box_id} ({error})") from None
    return states(target)


def _power(arm: ArmClient, node: int, box_id: str) -> BoxPower:
    try:
        view = arm.get(f"{box_id}/instanceView", API)
    except ArmError as error:
        if error.status == 404:
            return BoxPower(node, box_id, GONE, "Azure does not know it: deleted")
        raise Exit(f"Azure would not describe {box_id} ({error}); run `az login`") from None
    codes = [status.get("code", "") for status in view.get("statuses", [])]
    power = next((code for code in codes if code.startswith("PowerState/")), "")
    return BoxPower(node, box_id, STATES.get(power, power or "unknown"), WHY.get(power, ""))
