"""Azure: the boxes' power from ARM (a VM's instance view, its `start`, read to the end
of its async operation: an AllocationFailed comes only there), their size in place (a
PATCH of `vmSize` on the deallocated VM), and the run's deadline, with your token.

ARM's instance view says what power state a VM is in, not what put it there: the box's
own stop record says that once it is up again (`fab status`).

A deadline is a tag on each VM (contract.DEADLINE_TAG), which the stack's keeper
workflow reads every few minutes: it starts an evicted VM again until then (where the
stack recovers) and deallocates the VM at it. Past the daily stop, each VM's DevTestLab
schedule is disabled too; the keeper enables it again once no deadline holds.
"""

from __future__ import annotations

import datetime

from invoke.exceptions import Exit

from box import contract
from ops import azure_login
from ops.cloud.power import GONE, RUNNING, STARTING, STOPPED, STOPPING, BoxPower
from ops.target.schema import Target
from stack.arm import ArmClient, ArmError, sku_refusal

API = "virtual_machines"
TAGS = "/providers/Microsoft.Resources/tags/default"
SCHEDULE_READ_ONLY = ("createdDate", "provisioningState", "uniqueIdentifier")
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
    try:
        return ArmClient.from_environment(azure_login.arm_token())
    except Exception as error:  # azure-identity raises its own kinds: one line for them all
        raise Exit(f"no Azure credentials ({type(error).__name__}); run `az login`") from None


def states(target: Target) -> list[BoxPower]:
    arm = _arm()
    return [_power(arm, node, box_id) for node, box_id in enumerate(target.box_ids)]


def try_start(target: Target) -> tuple[str, str] | None:
    """Start every stopped VM, each to the end of its operation; ARM's (code, message) of
    the first refusal, None when all started. A refusal deallocates the VMs this try
    started: the boxes of a stack move to another size together, or not at all."""
    arm, started = _arm(), []
    for box in states(target):
        if box.state != STOPPED:
            continue
        try:
            arm.run("POST", f"{box.box_id}/start", API)
        except ArmError as error:
            for box_id in started:
                _deallocate(arm, box_id)
            if error.code:
                return error.code, error.detail
            raise Exit(f"Azure would not start {box.box_id} ({error})") from None
        started.append(box.box_id)
    return None


def _deallocate(arm: ArmClient, box_id: str) -> None:
    try:
        arm.run("POST", f"{box_id}/deallocate", API)
    except ArmError as error:
        raise Exit(
            f"{box_id} started but its peer did not, and Azure would not deallocate it "
            f"({error}): it bills; `fab stop` or the portal stops it"
        ) from None


def where(target: Target) -> tuple[str, str]:
    """(size, zone) box 0 has now ("" zone: a regional VM)."""
    try:
        vm = _arm().get(target.box_ids[0], API)
    except ArmError as error:
        raise Exit(
            f"Azure would not describe {target.box_ids[0]} ({error}); run `az login`"
        ) from None
    zones = vm.get("zones") or [""]
    return vm["properties"]["hardwareProfile"]["vmSize"], zones[0]


def sold_in(target: Target, zone: str, sizes: list[str]) -> set[str]:
    """Which of `sizes` this subscription may have in `zone` of the region."""
    subscription = target.box_ids[0].split("/")[2]
    try:
        answer = _arm().get(
            f"/subscriptions/{subscription}/providers/Microsoft.Compute/skus",
            "skus",
            **{"$filter": f"location eq '{target.region}'"},
        )
    except ArmError as error:
        raise Exit(f"Azure would not list the sizes of {target.region} ({error})") from None
    skus = {s["name"].lower(): s for s in answer.get("value", [])}
    wanted = [zone] if zone else []
    return {
        size for size in sizes if not sku_refusal(skus.get(size.lower()), target.region, wanted)
    }


def resize(target: Target, size: str) -> None:
    """Every VM (deallocated) to `size`: a PATCH of its hardware profile alone."""
    arm = _arm()
    body = {"properties": {"hardwareProfile": {"vmSize": size}}}
    for box_id in target.box_ids:
        try:
            arm.run("PATCH", box_id, API, body)
        except ArmError as error:
            raise Exit(f"Azure would not resize {box_id} to {size} ({error})") from None


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


def set_deadline(target: Target, until: datetime.datetime, past_daily_stop: bool) -> None:
    arm = _arm()
    stamp = until.astimezone(datetime.timezone.utc).strftime(contract.DEADLINE_TAG_FORMAT)
    try:
        for box_id in target.box_ids:
            _tags(arm, box_id, "Merge", {contract.DEADLINE_TAG: stamp})
        # Tagged first: the keeper ends the run at the deadline once the daily stop is off.
        _daily_stops(arm, target, enabled=not past_daily_stop)
    except ArmError as error:
        raise Exit(f"Azure would not set the deadline of {target.source} ({error})") from None


def clear_deadline(target: Target) -> None:
    arm = _arm()
    try:
        _daily_stops(arm, target, enabled=True)
        for box_id in target.box_ids:
            stamp = _tag(arm, box_id)
            if stamp is not None:
                _tags(arm, box_id, "Delete", {contract.DEADLINE_TAG: stamp})
    except ArmError as error:
        raise Exit(f"Azure would not clear the deadline of {target.source} ({error})") from None


def deadline(target: Target) -> datetime.datetime | None:
    try:
        stamp = _tag(_arm(), target.box_ids[0])
    except ArmError as error:
        raise Exit(f"Azure would not read the deadline of {target.source} ({error})") from None
    if stamp is None:
        return None
    try:
        return datetime.datetime.strptime(stamp, contract.DEADLINE_TAG_FORMAT).replace(
            tzinfo=datetime.timezone.utc
        )
    except ValueError:
        raise Exit(
            f"{target.box_ids[0]}: tag {contract.DEADLINE_TAG}={stamp!r} is no deadline "
            f"({contract.DEADLINE_TAG_FORMAT}); `fab stop` clears it"
        ) from None


def recovery_gaps(target: Target, until: datetime.datetime) -> list[str]:
    """The keeper starts evicted VMs again only where the stack recovers."""
    if target.spot and not target.auto_recover:
        return ["autoRecover is off for this spot stack: an evicted box waits for `fab start`"]
    return []


def _tag(arm: ArmClient, box_id: str) -> str | None:
    return (arm.get(box_id + TAGS, "tags").get("properties", {}).get("tags") or {}).get(
        contract.DEADLINE_TAG
    )


def _tags(arm: ArmClient, box_id: str, operation: str, tags: dict[str, str]) -> None:
    # The tags resource alone: writing the VM itself needs far more rights.
    arm.patch(box_id + TAGS, "tags", {"operation": operation, "properties": {"tags": tags}})


def _daily_stops(arm: ArmClient, target: Target, *, enabled: bool) -> None:
    status = "Enabled" if enabled else "Disabled"
    for schedule_id in target.daily_stop_schedules:
        # A schedule's PATCH changes its tags alone (GlobalSchedules_Update, 2018-09-15):
        # the status goes in a PUT of the schedule as it is, read-only parts left out.
        schedule = arm.get(schedule_id, "schedules")
        properties = {
            key: value
            for key, value in schedule.get("properties", {}).items()
            if key not in SCHEDULE_READ_ONLY
        }
        body = {"location": schedule["location"], "tags": schedule.get("tags") or {}}
        arm.put(schedule_id, "schedules", {**body, "properties": {**properties, "status": status}})
