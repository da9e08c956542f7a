"""Azure: the boxes' power from ARM (a VM's instance view, its `start` followed to the end
of its async operation: an AllocationFailed comes only there), their size in place (a
PATCH of `vmSize` on the deallocated VM, followed to its end before any start), and the
run's deadline, with your login. The long-running writes (start, deallocate, resize)
go through azure-mgmt-compute's pollers; reads and the deadline's writes, which end
when ARM answers, through `stack.arm`.

ARM's instance view says what power state a VM is in, not what put it there: the box's
own stop record says that once it is up again (`fab status`).

A deadline is a tag on each VM (contract.DEADLINE_TAG), which the stack's keeper
workflow reads every few minutes: it starts an evicted VM again until then (where the
stack recovers) and deallocates the VM at it. Past the daily stop, each VM's DevTestLab
schedule is disabled too; the keeper enables it again once no deadline holds.
"""

from __future__ import annotations

import datetime
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from invoke.exceptions import Exit

from box import contract
from ops import azure_login
from ops.cloud.power import GONE, RUNNING, STARTING, STOPPED, STOPPING, BoxPower
from ops.target.schema import Target
from stack.arm import HTTP_TIMEOUT_SECONDS, ArmClient, ArmError, arm_endpoint, sku_refusal

API = "virtual_machines"
# A start, deallocation or resize is polled this often unless ARM says (Retry-After), for
# at most this long: one that has not ended in 15 minutes is reported, not waited on.
OPERATION_POLL_SECONDS = 5
OPERATION_TIMEOUT_SECONDS = 15 * 60
HTTP_RETRIES = 3
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
    stopped = [box.box_id for box in states(target) if box.state == STOPPED]
    machines = _compute(target).virtual_machines
    refusal, started = _to_the_end(stopped, "start", machines.begin_start)
    for box_id in started if refusal else []:
        again, _ = _to_the_end([box_id], "deallocate", machines.begin_deallocate)
        if again:
            raise Exit(
                f"{box_id} started but its peer did not, and Azure would not deallocate it "
                f"({': '.join(again)}): it bills; `fab stop` or the portal stops it"
            )
    return refusal


def where(target: Target, node: int = 0) -> tuple[str, str]:
    """(size, zone) box `node` has now ("" zone: a regional VM)."""
    box_id = target.box_ids[node]
    try:
        vm = _arm().get(box_id, API)
    except ArmError as error:
        raise Exit(f"Azure would not describe {box_id} ({error}); run `az login`") from None
    zones = vm.get("zones") or [""]
    return vm["properties"]["hardwareProfile"]["vmSize"], zones[0]


def not_sold(target: Target, zone: str, sizes: list[str]) -> dict[str, str]:
    """Each of `sizes` this subscription may not have in `zone` of the region, and why
    (the Resource SKUs' restriction, in ARM's words)."""
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
    why = {size: sku_refusal(skus.get(size.lower()), target.region, wanted) for size in sizes}
    return {size: refusal for size, refusal in why.items() if refusal}


def resize(target: Target, size: str, box_ids: list[str]) -> tuple[str, str] | None:
    """The VMs `box_ids` to `size` (stopped ones only: Azure reboots a running VM onto
    its new size), each PATCH of the hardware profile alone followed to its end; ARM's
    (code, message) when it refuses, None once every VM has its new size."""
    from azure.mgmt.compute.models import HardwareProfile, VirtualMachineUpdate

    update = VirtualMachineUpdate(hardware_profile=HardwareProfile(vm_size=size))
    machines = _compute(target).virtual_machines
    refusal, _ = _to_the_end(box_ids, f"resize to {size}", machines.begin_update, update)
    return refusal


def _compute(target: Target) -> Any:
    """azure-mgmt-compute's client on ARM's endpoint with your login. Its pollers follow a
    start, deallocation or resize to the operation's end however ARM names it (200, 201
    or 202 with `Azure-AsyncOperation`, else `Location`; a PATCH's 200 with the VM still
    "Updating" is not its end: https://learn.microsoft.com/azure/azure-resource-manager/
    management/async-operations) and raise the operation's own error (AllocationFailed)."""
    from azure.mgmt.compute import ComputeManagementClient

    return ComputeManagementClient(
        azure_login.arm_credential(),
        target.box_ids[0].split("/")[2],
        base_url=arm_endpoint(),
        polling_interval=OPERATION_POLL_SECONDS,
        connection_timeout=HTTP_TIMEOUT_SECONDS,
        read_timeout=HTTP_TIMEOUT_SECONDS,
        retry_total=HTTP_RETRIES,
    )


def _to_the_end(
    box_ids: list[str], doing: str, begin: Callable[..., Any], *args: Any
) -> tuple[tuple[str, str] | None, list[str]]:
    """`begin` (a `begin_*` of the VMs' operations) on each VM, all under way together,
    each followed to its end within OPERATION_TIMEOUT_SECONDS: (ARM's first refusal as
    (code, message) or None, the VMs whose operation succeeded)."""
    from azure.core.exceptions import AzureError

    pollers, refusal = {}, None
    for box_id in box_ids:
        group, name = box_id.split("/")[4], box_id.rsplit("/", 1)[1]
        try:
            pollers[box_id] = begin(group, name, *args, **_request_options())
        except AzureError as error:
            refusal = _refusal(error, doing, box_id)
            break
    done, give_up = [], time.monotonic() + OPERATION_TIMEOUT_SECONDS
    for box_id, poller in pollers.items():
        try:
            poller.wait(max(0.0, give_up - time.monotonic()))
        except AzureError as error:
            refusal = refusal or _refusal(error, doing, box_id)
            continue
        if not poller.done():
            raise Exit(
                f"Azure had not ended the {doing} of {box_id} after "
                f"{OPERATION_TIMEOUT_SECONDS // 60} minutes; `fab status` shows its power "
                "now: run `fab start` again once it has ended"
            )
        done.append(box_id)
    return refusal, done


def _refusal(error: Exception, doing: str, box_id: str) -> tuple[str, str]:
    """ARM's (code, message) of a refused operation; Exit for anything else (no login, ARM
    unreachable, an answer without a code)."""
    from azure.core.exceptions import ClientAuthenticationError

    if isinstance(error, ClientAuthenticationError):
        raise Exit(f"no Azure credentials ({type(error).__name__}); run `az login`") from None
    detail = getattr(error, "error", None)
    if detail is None or not detail.code:
        raise Exit(f"Azure would not {doing} {box_id} ({error})") from None
    return str(detail.code), str(detail.message or "")


def _request_options() -> dict[str, Any]:
    """A token goes over HTTPS only, except to this machine: the tests' fake of ARM
    (GLUCOSE_ARM_ENDPOINT) listens on 127.0.0.1 over plain HTTP."""
    url = urllib.parse.urlsplit(arm_endpoint())
    local = url.scheme == "http" and url.hostname in ("127.0.0.1", "localhost", "::1")
    return {"enforce_https": False} if local else {}


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
